"""The session's inputs: the images, their working size and transforms (a part of ``Session``).

Also :func:`read_images`, what a driver thread runs to read and preprocess files without touching a
session, and :class:`LoadedImages`, what it hands to :meth:`SessionInputs.add_loaded`.
"""
from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, replace

import numpy as np

from . import options, se2
from .demos import load_demo
from .filenames import display_name, printable
from .imageset import ImageSet, image_files, load_image, load_images, no_usable_images, read_entries, skip_entry
from .particle_ctf import flip_problem, phase_flip_particles
from .preprocess import Canvas, apply_transforms, preprocess
from .warp import warp
from .wording import count_of

log = logging.getLogger(__name__)


class SessionInputs:
    """The image set and its transforms: loaded, added, resized, transformed (a part of ``Session``).

    The inputs are frozen while a run works on them; changing them discards a finished or stopped run
    (:meth:`~iastudio.core.session.Session.work_at_risk` says what that loses).
    """

    # the state this part shares with the others (set in ``Session.__init__``), typed for mypy
    canvas: Canvas | None
    project_path: str | None
    _preview: Canvas | None
    _originals: Originals | None

    # ------------------------------------------------------------------ images
    def load_demo(self, name: str, *, seed: int = 0, size: int | None = None) -> bool:
        """Replace the set by the demo ``name`` (a new, untitled set), at working ``size`` if given."""
        if not self._inputs_may_change("loading other images", replacing=True):
            return False
        if size is not None:
            self.size = options.check("size", int(size))
        self._set_data(load_demo(name, seed=seed), untitled=True)
        self.message(f"Loaded demo '{name}': {self.data.summary()}")
        return True

    def add_paths(self, paths, progress=None, *, replace: bool = False) -> list[dict]:
        """Add files/folders (or replace the set with them); returns the skipped list (also in a message).

        Reads them here with :func:`read_images` (``progress(done, total, path)`` is called before each
        file; returning False stops the loading and keeps what was read).  A GUI reads them in a worker
        thread instead and gives the result to :meth:`add_loaded`.
        """
        if not self.begin_adding():
            return []
        return self.add_loaded(read_images(paths, size=self.size, progress=progress), replace=replace)

    def begin_adding(self) -> bool:
        """May images be read for this session now?  False (with a message) while a run works on the inputs.

        Nothing is discarded here: the run they would no longer match goes only when :meth:`add_loaded`
        actually adds something (a file that holds no image changes nothing).
        """
        if self.busy:
            self.message("Stop the run before adding images.")
            return False
        return True

    def add_loaded(self, loaded: LoadedImages, *, replace: bool = False, size: int | None = None) -> list[dict]:
        """Add images read by :func:`read_images` (or replace the set with them); returns the skipped list.

        Call it on the thread that owns the session.  Refused (returning ``[]``) while a run works on
        the inputs; images preprocessed at another working size than the session's are done again.
        Nothing read (no file held an image): nothing changes but the list of skipped files.
        ``size`` (with ``replace``): the new set's working size.
        """
        if not self.begin_adding():
            return []
        new = loaded.data
        if not len(new):  # nothing to add: the set, the run and the project stay exactly as they were
            exc = no_usable_images(new.skipped)
            self.data.skipped.extend(exc.skipped)
            self.events.images.emit()
            self.message(f"Nothing {'opened' if replace else 'added'}: {exc}")
            return exc.skipped
        if not self._inputs_may_change("adding images", replacing=replace):
            return []
        if replace and size is not None:
            self.size = options.check("size", int(size))
        canvas = loaded.canvas if loaded.size == self.size else preprocess(new.images, size=self.size)
        kept = None if replace or not self.n else self.transforms.copy()
        if kept is None:
            self._set_data(new, canvas, untitled=replace)
        else:
            old = self.canvas  # None when its side differs: the whole set is preprocessed again
            same = old is not None and old.images.shape[1:] == canvas.images.shape[1:]
            self._set_data(self.data.extend(new), stack_canvases([old, canvas]) if same else None)
        if kept is not None and kept.any():  # the transforms already set stay; new images start untransformed
            self.transforms[: len(kept)] = kept
            self._update_working()
        msg = f"Added {count_of(len(new), 'image')}"
        if new.skipped:
            msg += f"; skipped {len(new.skipped)}: " + "; ".join(
                f"{printable(display_name(s['path']))} ({printable(s['reason'])})" for s in new.skipped[:3])
        self.message(msg)
        return new.skipped

    def remove_images(self, indices) -> bool:
        """Take the images at ``indices`` out of the set (their files are not touched).

        The run they were part of is discarded (refused while it works); the other images keep their
        transforms, and the session stays the opened project's (saving it writes the smaller set).
        """
        drop = sorted({int(i) for i in np.ravel(indices) if 0 <= int(i) < self.n})
        if not drop:
            self.message("Select the images to remove first.")
            return False
        if not self._inputs_may_change("removing images"):
            return False
        keep = np.setdiff1d(np.arange(self.n), drop)
        names = [printable(display_name(self.data.paths[i])) for i in drop[:3]]
        files = any(not self.data.paths[i].startswith("demo:") for i in drop)  # a demo's images have none
        transforms, old = self.transforms[keep], self.canvas
        canvas = None if old is None else old.take(keep)
        self._set_data(self.data.subset(keep), canvas)
        if transforms.any():
            self.transforms = transforms
            self._update_working()
        more = f" and {len(drop) - 3} more" if len(drop) > 3 else ""
        self.message(f"Removed {count_of(len(drop), 'image')} from the set ({', '.join(names)}{more})"
                     + (f"; {'its file is' if len(drop) == 1 else 'their files are'} not touched" if files else ""))
        return True

    def set_images(self, data: ImageSet) -> bool:
        """Replace the image set by ``data`` (an :class:`~iastudio.core.imageset.ImageSet`)."""
        if not self._inputs_may_change("replacing the images", replacing=True):
            return False
        self._set_data(data, untitled=True)
        return True

    def clear(self) -> bool:
        if not self._inputs_may_change("clearing the images", replacing=True):
            return False
        self._set_data(ImageSet([], [], [], []), untitled=True)
        return True

    def set_size(self, size: int) -> bool:
        """Change the working size (the images are preprocessed again; transforms are rescaled)."""
        size = int(size)
        if size == self.size:
            return True
        if problem := options.problem("size", size, label="the working size"):
            self.message(problem[0].upper() + problem[1:] + ".")
            return False
        if not self._inputs_may_change("changing the working size"):
            return False
        old = self.base.shape[1] if self.n else self.size
        self.size = size
        if self.n:
            t = self.transforms.copy()
            self._preprocess()
            t[:, 1:] *= self.base.shape[1] / old
            self.transforms = t
            self._update_working()
            self.events.images.emit()
        return True

    def _set_data(self, data: ImageSet, canvas: Canvas | None = None, *, untitled: bool = False) -> None:
        """Install ``data``, with ``canvas`` as its preprocessed images (None: preprocess them here).

        ``untitled``: ``data`` is a new set, not the opened project's (a demo, another folder): the
        session is no longer that project's, and saving it asks for a file (as after *New*).
        """
        if untitled:
            self.project_path = None
            self.embedded = False  # images read from files or made here, no longer a project's canvases
            self.opened_denoised, self._originals = False, None
        self.data = data
        self._preview = None
        if canvas is None:
            self._preprocess()
        else:
            self.canvas, self.base = canvas, canvas.images
        self.transforms = np.zeros((self.n, 3))
        self.working = self.base
        self.selection = []
        self.discard_run()
        self.events.images.emit()
        self.events.transforms.emit()
        self.events.selection.emit([])
        self._mark_dirty()

    def _preprocess(self) -> None:
        self._preview = None  # the canvas is the per-image previews again
        if self.n:
            self.canvas = preprocess(self.data.images, size=self.size)
            self.base = self.canvas.images
        else:
            self.canvas = None
            self.base = np.zeros((0, self.size, self.size), np.float32)

    def _show_run_canvas(self, canvas: Canvas, working: np.ndarray) -> None:
        """The run denoised the set: its canvas and working images become the session's (the gallery shows
        what the run clusters); the per-image previews are kept to go back to (:meth:`_restore_preview`)."""
        if self._preview is None:
            self._preview = self.canvas
        self.canvas, self.base, self.working = canvas, canvas.images, working
        self.events.images.emit()
        self.events.transforms.emit()

    def _restore_preview(self) -> None:
        """Back to the per-image preview canvases after a denoised run's images (its run being discarded)."""
        if self._preview is None:
            self._preview = self._opened_previews()
        if self._preview is None:
            return
        self.canvas, self._preview = self._preview, None
        self.base = self.canvas.images
        self.working = self.base if not self.transforms.any() else apply_transforms(self.base, self.transforms)
        self.events.images.emit()
        self.events.transforms.emit()

    @property
    def shows_denoised(self) -> bool:
        """The images shown are a denoised run's (live, or a reopened project's), not as their files hold them."""
        return self._preview is not None or self.opened_denoised

    @property
    def originals_to_read(self) -> list[str] | None:
        """The files the next input change reads again, or None when it reads none.

        An opened project whose run denoised the images it embeds shows them until an input change
        (a new working size, transforms, a run, ...): the change reads the project's original files
        again, one per image, and the set's images become theirs.  A front end reads these files in a
        driver thread first (:func:`read_originals`) and hands them over (:meth:`take_originals`), so
        that the change does not read them on the thread that owns the session.  None once they are held.
        """
        if not (self.embedded and self.opened_denoised and self.n):
            return None
        held = self._originals
        if held is not None and held.paths == list(self.data.paths):
            return None
        return list(self.data.paths)

    def take_originals(self, originals: Originals) -> None:
        """Hold the original files a driver read (:func:`read_originals` of :attr:`originals_to_read`).

        Nothing changes yet: the next input change uses them instead of reading the files itself (and
        says, as it would have, when they could not all be read).  Ignored when the set is no longer
        the one they were read for.
        """
        if self.originals_to_read == originals.paths:
            self._originals = originals

    def _opened_previews(self) -> Canvas | None:
        """An opened project's run denoised its images, and it embeds them: the per-image previews of its
        original files, read again (None when the run did not denoise, or a file cannot be read: said so).

        The files held (:meth:`take_originals`) when they were read for this set; else read here."""
        held, self._originals = self._originals, None
        if not (self.embedded and self.opened_denoised and self.n):
            return None
        self.opened_denoised = False  # read once: from now on the previews are the originals'
        if held is None or held.paths != list(self.data.paths):
            held = read_originals(self.data.paths, size=self.size)
        loaded = held.loaded
        if loaded is None or len(loaded.data) != self.n or loaded.data.skipped:
            self.message("The thumbnails still show the run's denoised images: the project's original files "
                         "could not all be read (the next run denoises these images again)")
            return None
        # the originals are the set's images from now on: a new working size, a run without the denoiser
        self.data, self.embedded = replace(self.data, images=list(loaded.data.images)), False
        if loaded.size == self.size and loaded.canvas is not None:
            return loaded.canvas
        return preprocess(loaded.data.images, size=self.size)

    # ------------------------------------------------------------------ transforms
    def apply_random_transforms(self, *, rotation_deg: float, shift_percent: float, seed: int) -> bool:
        if not self.n or not self._inputs_may_change("transforming the images"):
            return False
        shift = shift_percent / 100.0 * self.base.shape[1]
        self.transforms = se2.random_transforms(self.n, rotation_range=rotation_deg, shift_range=shift, seed=seed)
        self._update_working()
        return True

    def reset_transforms(self) -> bool:
        if not self._inputs_may_change("resetting the transforms"):
            return False
        self.transforms = np.zeros((self.n, 3))
        self._update_working()
        return True

    def set_transform(self, i: int, theta_deg: float, tx: float, ty: float) -> bool:
        if not self._inputs_may_change("transforming an image"):
            return False
        self.transforms[i] = (np.deg2rad(theta_deg), tx, ty)
        self._update_working(only=i)
        return True

    def _update_working(self, only: int | None = None) -> None:
        if not self.n or not self.transforms.any():
            self.working = self.base  # the originals, exactly
        elif only is None:
            self.working = apply_transforms(self.base, self.transforms)
        else:
            w = self.working.copy()
            w[only] = apply_transforms(self.base[only][None], self.transforms[only][None])[0]
            self.working = w
        self.events.transforms.emit()
        self._mark_dirty()


@dataclass
class LoadedImages:
    """Images read and preprocessed by :func:`read_images`, not yet in a session.

    Attributes
    ----------
    data : ImageSet
        The images read (maybe none) and every file skipped, with its reason.
    canvas : Canvas or None
        ``data``'s images preprocessed at ``size``; None when there are none.
    size : int
        The working size they were preprocessed at.
    """

    data: ImageSet
    canvas: Canvas | None
    size: int


def read_images(paths, *, size: int, progress=None) -> LoadedImages:
    """Read and preprocess image files and folders, one file at a time, without touching any session.

    What a driver thread runs so that the thread owning the session only commits the result
    (:meth:`Session.add_loaded`).  A file that cannot be read or prepared is skipped with its reason,
    as in :func:`~iastudio.core.imageset.load_images`.

    Parameters
    ----------
    paths : str, Path or sequence of them
        Image files, stacks, STAR files and folders (folders searched recursively; subfolder names become
        labels); a stack's images are read one at a time (:func:`~iastudio.core.imageset.read_entries`).
    size : int
        The working size to preprocess at (:func:`~iastudio.core.preprocess.preprocess`).
    progress : callable(done, total, path), optional
        Called before each image is read: ``done`` images are done and ``path`` is next (``total`` grows as
        stacks are opened).  Returning
        ``False`` stops there; what was read is kept and the rest is skipped ("not loaded: cancelled").

    Returns
    -------
    LoadedImages
    """
    files, skipped = image_files(paths)
    images, names, labels, canvases, ctf = [], [], [], [], []
    for entry in read_entries(files, progress=progress, load=load_image):
        if entry.error is None:
            try:
                canvases.append(preprocess([entry.image], size=size))  # per image: the same as all at once
            except Exception as exc:  # noqa: BLE001 - one file never ends the set
                entry.error = exc
        if entry.error is not None:
            skipped.append(skip_entry(entry.name, entry.error))
            continue
        images.append(entry.image)
        names.append(entry.name)
        labels.append(entry.label)
        ctf.append(entry.ctf)  # a STAR row's CTF parameters stay with its image (skipped rows drop theirs)
    data = ImageSet(images, names, labels, skipped, ctf=ctf if any(c is not None for c in ctf) else None)
    return LoadedImages(data, stack_canvases(canvases), int(size))


@dataclass
class Originals:
    """An opened project's original files read again by :func:`read_originals`, not yet in a session.

    Attributes
    ----------
    paths : list of str
        The set's paths they were read for (:attr:`SessionInputs.originals_to_read`).
    loaded : LoadedImages or None
        What was read, one image per path when all could be; None when the reading failed as a whole
        (the reason is logged).
    """

    paths: list[str]
    loaded: LoadedImages | None


def read_originals(paths, *, size: int, progress=None) -> Originals:
    """Read an opened project's original files again, and preprocess them, without touching any session.

    What a driver thread runs for :attr:`SessionInputs.originals_to_read` before an input change (the
    session takes the result with :meth:`SessionInputs.take_originals`); a session that holds none
    reads them itself, here, when the change comes.  ``size`` and ``progress`` as in
    :func:`read_images` (a file not read, or the reading stopped, leaves the set's images as they are).
    """
    paths = list(paths)
    try:
        loaded = read_images(paths, size=size, progress=progress)
    except Exception as exc:  # noqa: BLE001 - a file gone or unreadable: the embedded images stay shown
        log.info("the project's originals cannot be read (%s)", exc)
        loaded = None
    return Originals(paths, loaded)


class RunInputs:
    """What a run clusters, made from the raw images where the run starts: the set phase-flipped
    (``phase_flip``), preprocessed as one stack, denoised (``denoise``), then moved by the user's transforms.

    The same steps as ``ia-cluster`` (:func:`~iastudio.core.particle_ctf.phase_flip_particles` with
    ``--phase-flip``, :func:`~iastudio.core.preprocess.preprocess` with ``denoise``, then
    :func:`~iastudio.core.preprocess.apply_transforms`), so the app and the command line give the same
    canvas for the same images and options.  Calling it does the work (0.2--2 s for hundreds of
    images): a driver thread calls it (:func:`~iastudio.core.session_run.stream_run`), never the GUI.

    Parameters
    ----------
    images : sequence of ndarray
        The raw images (``ImageSet.images``).
    size : int
        The working size.
    transforms : ndarray, shape (n, 3)
        The user's transforms (canvas px), applied after preprocessing.
    denoise : {"auto", "on", "off"}
        As ``ia-cluster --denoise`` (:func:`iastudio.core.denoise.denoise`).
    originals : sequence of str, optional
        ``images`` are an opened project's embedded working images (canvases, whose cleared corners
        hold no noise to measure): read the original files from these paths instead, and use
        ``images`` only when one of them cannot be read (the report's note says so).
    phase_flip : bool
        Phase-flip each raw image with its own CTF parameters first, as ``ia-cluster --phase-flip``.
    ctf : sequence of ParticleCtf, optional
        One per image (``ImageSet.ctf``); needed with ``phase_flip``.
    scale : ndarray, shape (n,), optional
        With ``originals``: the embedded images' canvas pixels per original pixel, so that flipping them
        (when the originals cannot be read) uses each image's pixel size on its canvas.

    Attributes
    ----------
    undenoised : ndarray or None
        Once called, where the denoiser changed the images: the images *before* denoising
        (:attr:`~iastudio.core.preprocess.Canvas.undenoised`), moved by the user's transforms as the
        working images are (warped, not clipped: the noise keeps its sign), for the run's class
        averages of them (:func:`~iastudio.core.frames.undenoised_means`); else None.
    note : str
        Once called: what the run's report adds about the images used ("" when nothing).
    """

    def __init__(self, images, *, size: int, transforms, denoise: str, originals=None, phase_flip: bool = False,
                 ctf=None, scale=None):
        self.images = list(images)
        self.size = int(size)
        self.transforms = np.array(transforms, dtype=float)
        self.denoise = options.check("denoise", denoise)
        self.originals = None if originals is None else list(originals)
        self.phase_flip = bool(phase_flip)
        self.ctf = None if ctf is None else list(ctf)
        self.scale = None if scale is None else np.asarray(scale, dtype=float)
        if self.phase_flip and (problem := flip_problem(self.ctf, self.images)):
            raise ValueError(f"cannot phase-flip: {problem}")
        self.note = ""  # what the run's report adds about the images used (set when they are made)
        self.undenoised: np.ndarray | None = None  # the images before denoising, moved (set when they are made)
        self._cancel = threading.Event()

    def _raw_images(self) -> tuple[list, str]:
        """The images to preprocess, and a note when the originals were wanted but not all read."""
        if self.originals is None:
            return self.images, ""
        try:
            loaded = load_images(self.originals)
        except Exception as exc:  # noqa: BLE001 - a file gone or unreadable: the embedded images serve
            log.info("the project's originals cannot be read (%s); denoising its embedded images", exc)
            loaded = None
        if loaded is not None and len(loaded) == len(self.images) and not loaded.skipped:
            return loaded.images, ""
        return self.images, ("the project's original files could not all be read, so its embedded working "
                             "images were used (their cleared corners show no noise)")

    def _flipped(self, images, embedded: bool) -> list:
        """``images`` phase-flipped with their CTF (on embedded canvases: at their canvas pixel size)."""
        ctf = self.ctf
        if embedded and self.scale is not None:
            ctf = [replace(c, pixel_size=c.pixel_size / float(s)) for c, s in zip(ctf, self.scale)]
        return phase_flip_particles(images, ctf)

    def __call__(self) -> tuple[Canvas, np.ndarray]:
        """``(canvas, working images)``; ``canvas.denoise`` says what the denoiser did."""
        images, why = self._raw_images()
        if self.phase_flip:  # first, on the raw images: the CTF acts on the particle as it was recorded
            images = self._flipped(images, embedded=bool(why))
        canvas = preprocess(images, size=self.size, denoise=self.denoise, keep_undenoised=True)
        if why and self.phase_flip:
            why = f"{why}; they were phase-flipped at their canvas pixel size"
        self.note = why  # read by the session once the run has its inputs
        if why and canvas.denoise is not None:
            canvas.denoise = replace(canvas.denoise, note=f"{canvas.denoise.note}; {why}")
        self.undenoised = canvas.undenoised
        if not self.transforms.any():
            return canvas, canvas.images
        if canvas.undenoised is not None:  # moved as the working images are, as ia-cluster --transform does
            self.undenoised = warp(canvas.undenoised, self.transforms)
        return canvas, apply_transforms(canvas.images, self.transforms)

    def cancel(self) -> None:
        """The run was stopped (thread-safe): a driver does not start it once the inputs are ready."""
        self._cancel.set()

    def rearm(self) -> None:
        """Make the inputs again when the stopped run resumes (the run had not begun)."""
        self._cancel.clear()

    @property
    def cancelled(self) -> bool:
        return self._cancel.is_set()


def stack_canvases(canvases) -> Canvas | None:
    """One :class:`~iastudio.core.preprocess.Canvas` of the given ones' images in order (same side); None for none."""
    cs = [c for c in canvases if c is not None]
    if not cs:
        return None
    return Canvas(np.concatenate([c.images for c in cs]), np.concatenate([c.scale for c in cs]),
                  np.concatenate([c.offset for c in cs]), [shape for c in cs for shape in c.original_shape])
