"""The session as a project file: snapshot, save, autosave, open, recover (part of ``Session``)."""
from __future__ import annotations

import copy
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from .attention import AttentionRun, RunState
from .filenames import display_name
from .frames import frames_from_project
from .imageset import ImageSet, load_images
from .particle_ctf import ctf_from_array, ctf_to_array
from .preprocess import Canvas, apply_transforms, preprocess
from .project import Project, ProjectError, history_entry, load_project, run_record, save_project
from .wording import count_of

if TYPE_CHECKING:
    from .session_inputs import Originals, RunInputs

log = logging.getLogger(__name__)


class SessionProject:
    """The session to and from a ``.iaproj`` (:mod:`~iastudio.core.project`) (a part of ``Session``)."""

    # the state this part shares with the others (set in ``Session.__init__``), typed for mypy
    run: AttentionRun | None
    _preview: Canvas | None
    run_inputs: RunInputs | None
    phase_flip_report: dict | None
    undenoised: np.ndarray | None
    _originals: Originals | None

    def to_project(self, *, autosave: bool = False) -> Project:
        """The session as a :class:`~iastudio.core.project.Project`: a snapshot that later changes do not touch.

        Its lists, dicts, parameters, transforms and cluster book are copies; its arrays (the working
        images, the run's history and result) are the session's own, which neither the session nor a
        run ever changes in place (they replace them), so another thread may write the project
        (:func:`~iastudio.core.project.save_project`) while the session goes on.  Cheap: nothing of
        the size of the images is copied.
        """
        res = self.result
        if self.run is None and res is not None:  # an opened project's result: its saved parameters again
            params = copy.deepcopy(self._opened_parameters)
        else:
            params = copy.deepcopy(vars(self.run.settings)) if self.run is not None else {}
            params["sigmas"] = list(params.get("sigmas", []))
        if self.run is not None:
            params["denoise"] = self.denoise
            rep = self.denoise_report
            params["denoise_report"] = rep.as_dict() if rep is not None else {"applied": False, "mode": self.denoise}
            params["phase_flip"] = self.phase_flip
            params["phase_flip_report"] = copy.deepcopy(self.phase_flip_report) or {"applied": False}
            params["backend"] = self.run.backend.name
            params.update(run_record(res) or {"beta_used": None})
            params["elapsed"] = self.elapsed
        view = copy.deepcopy(self.view_state)
        view.pop("recover_to", None)
        if autosave:  # the project it came from, to link a recovered session to it again
            view["recover_to"] = self.project_path
        if view:
            params["view"] = view
        book = None if self.book is None else replace(self.book, names=dict(self.book.names))
        return Project(
            paths=list(self.data.paths), labels=list(self.data.labels),
            skipped=[dict(s) for s in self.data.skipped],
            size=self.size, transforms=self.transforms.copy(), base=self.base,
            scale=None if self.canvas is None else self.canvas.scale,
            offset=None if self.canvas is None else self.canvas.offset,
            parameters=params, clusters=book, history=[history_entry(f.snapshot) for f in self.frames],
            result={} if res is None else res.arrays(), edits=list(self.edits),
            ka_labels=None if self.final is None else self.final.ka_labels,
            undenoised_means=None if self.final is None else self.final.undenoised_means,
            ctf=ctf_to_array(self.data.ctf, self.n),
        )

    def adopt_recovered(self) -> None:
        """Keep an opened autosave as unsaved work of the project it was autosaved from (if that file is
        still there; otherwise untitled), with a plain message instead of the autosave's path."""
        origin = self.view_state.pop("recover_to", None)
        self.project_path = origin if isinstance(origin, str) and os.path.isfile(origin) else None
        self._mark_dirty(True)
        name = os.path.basename(self.project_path) if self.project_path else "an untitled session"
        self.message(f"Recovered the last session ({name}, {count_of(self.n, 'image')}): not saved yet.")

    def save_project(self, path, *, embed: bool = True) -> None:
        """Write the session to ``path``, which becomes the project's own file (see :meth:`mark_saved`)."""
        revision = self.revision
        save_project(path, self.to_project(), embed=embed)
        self.mark_saved(path, revision=revision)

    def mark_saved(self, path, *, revision: int) -> None:
        """The session as it was at ``revision`` (:attr:`revision`) is written to ``path``.

        ``path`` becomes the project's own file, and the session is clean unless it changed since that
        snapshot (a save written by another thread while the user went on editing).
        """
        self.project_path = str(path)
        self.dirty = self.revision != revision
        self.events.project.emit()
        self.message(f"Saved {path}")

    def autosave(self, path) -> bool:
        """Write the session to ``path`` (not changing the project's own path or dirty flag)."""
        if not self.n:
            return False
        save_project(path, self.to_project(autosave=True))
        return True

    def open_project(self, path) -> Project:
        """Open a ``.iaproj``; raises :class:`~iastudio.core.project.ProjectError` when it cannot be used.

        Transactional: the project is read and checked and the whole new session is built aside first;
        only then is the current session replaced.  On any failure the session is untouched.
        """
        if self.busy:
            raise ProjectError(f"{path}: stop the run before opening a project")
        proj = load_project(path)
        try:
            state = _state_from_project(proj, path)
        except ProjectError:
            raise
        except Exception as exc:  # noqa: BLE001 - any problem with the contents is a refusal
            log.exception("cannot open project %s", path)
            reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
            raise ProjectError(f"{path}: cannot be opened ({reason})") from None
        self._install(state)
        missing = state["missing"]
        note = ""
        if missing:
            note = (f"; {len(missing)} original file(s) moved or missing, using the embedded images: "
                    + ", ".join(display_name(p) for p in missing[:5]))
        self.message(f"Opened {path}: {proj.n} images{note}")
        proj.missing = missing
        return proj

    def _install(self, st: dict) -> None:
        """Replace the session by one built by :func:`_state_from_project` (cannot fail)."""
        self.data, self.size, self.canvas, self.base = st["data"], st["size"], st["canvas"], st["base"]
        self.transforms, self.working = st["transforms"], st["working"]
        self.selection = []
        self.run = None
        self.frames = st["frames"]
        self.latest = st["frames"][-1] if st["frames"] else None
        self.final = st["final"]
        self.elapsed = st["elapsed"]
        self._opened_parameters = st["parameters"]
        self._preview = None
        self.embedded = st["embedded"]
        report = st["parameters"].get("denoise_report")
        self.opened_denoised = self.embedded and isinstance(report, dict) and report.get("applied") is True
        self._originals = None
        self.run_inputs = None
        self.undenoised = None  # not in a project (its class averages are: Frame.undenoised_means)
        self.denoise_report = None  # an opened run's report is in its parameters ("denoise_report") and notes
        denoise = st["parameters"].get("denoise")
        self.denoise = denoise if denoise in ("auto", "on", "off") else "auto"  # older projects: the default
        self.phase_flip = st["parameters"].get("phase_flip") is True  # older projects: off
        self.phase_flip_report = None  # as the denoiser's: in the parameters and the notes
        view = st["parameters"].get("view")
        self.view_state = dict(view) if isinstance(view, dict) else {}
        self.book = st["book"]
        self.history.clear()
        self.edits = st["edits"]
        self.project_path = st["path"]
        self._set_state(RunState.FINISHED if self.final is not None else RunState.IDLE)
        for signal in (self.events.images, self.events.transforms, self.events.clusters, self.events.history):
            signal.emit()
        self.events.selection.emit([])
        self.events.frame.emit(self.latest)
        if self.final is not None:
            self.events.finished.emit(self.final)
        self._mark_dirty(False)


def _state_from_project(proj: Project, path) -> dict:
    """Everything :meth:`Session.open_project` installs, built without touching the session."""
    n = proj.n
    missing = proj.missing_originals()
    ctf = ctf_from_array(proj.ctf)  # each image's CTF parameters, when they came from a STAR file
    if proj.base is None:
        if missing:
            raise ProjectError(f"{path}: the original images were moved and the project has no embedded "
                               f"copies; missing: {', '.join(missing[:5])}")
        loaded = load_images(proj.paths)
        if len(loaded) != n:
            bad = "; ".join(f"{s['path']}: {s['reason']}" for s in loaded.skipped[:3])
            raise ProjectError(f"{path}: {n - len(loaded)} of the {n} original images cannot be read "
                               f"and the project has no embedded copies ({bad})")
        canvas = preprocess(loaded.images, size=proj.size)
        data = ImageSet(loaded.images, list(proj.paths), list(proj.labels), list(proj.skipped), ctf=ctf)
    else:
        base = proj.base.astype(np.float32, copy=False)
        canvas = Canvas(base, proj.scale if proj.scale is not None else np.ones(n),
                        proj.offset if proj.offset is not None else np.zeros((n, 2)), [])
        data = ImageSet(list(base), list(proj.paths), list(proj.labels), list(proj.skipped), ctf=ctf)
    base = canvas.images
    transforms = np.array(proj.transforms, dtype=float)
    working = base if not transforms.any() else apply_transforms(base, transforms)
    frames, final = frames_from_project(proj, working)
    if proj.clusters is not None and proj.clusters.n != n:
        raise ProjectError(f"{path}: the clusters do not match the images")
    elapsed = proj.parameters.get("elapsed")
    return {"data": data, "embedded": proj.base is not None,
            "size": int(proj.size), "canvas": canvas, "base": base, "transforms": transforms,
            "working": working, "frames": frames, "final": final, "book": proj.clusters,
            "edits": list(proj.edits), "path": str(path), "missing": missing,
            "elapsed": float(elapsed) if isinstance(elapsed, (int, float)) else 0.0,
            "parameters": copy.deepcopy(dict(proj.parameters))}
