"""Keeps every panel and view of the window in step with the session (they only draw what they are given)."""
from __future__ import annotations

import numpy as np
from PySide6.QtCore import QItemSelection, QItemSelectionModel

from iastudio.core.filenames import display_name
from iastudio.core.frames import book_frame, weight_range
from iastudio.core.particle_ctf import flip_problem

from .docks import show_view
from .events import listen

WAITING = {"weights_view": "Computing the invariant similarity of every pair… W appears when it is done.",
           "means_view": "The invariant means appear after the similarity stage.",
           "convergence_view": "The curves and the map appear after the similarity stage.",
           "compare_view": "The comparison appears when the run is done."}


class ViewSync:
    """Connects the session's events to the window's panels and views."""

    def __init__(self, window):
        self.w, self.session = window, window.model.session
        self.drawn = None  # the frame the views show
        self._drawn_key = None  # (frame id, scrubbed?) of what the views show
        self._levels = (None, (0.0, 1.0))  # (key of the frames it was computed on, W's fixed levels)
        self.redraws = 0
        s = self.session
        listen(s.events.images, self.images_changed)
        listen(s.events.transforms, self.transforms_changed)
        listen(s.events.selection, self.selection_changed)
        listen(s.events.clusters, self.clusters_changed)
        listen(s.events.inspect, self.show_inspect)
        listen(s.events.state, window.run_panel.set_state)
        listen(s.events.progress, window.run_panel.set_progress)
        listen(s.events.finished, self.finished)
        window.scrubber.positionChanged.connect(self.redraw)
        window.images_panel.view.selectionModel().selectionChanged.connect(self.thumb_selection)
        window.transform_panel.show_original.toggled.connect(lambda _: self.update_preview())
        window.means_view.per_cluster.toggled.connect(lambda _: self.remember_view())
        window.means_view.averages.currentIndexChanged.connect(lambda _: self.remember_view())
        window.clusters_panel.k_auto.toggled.connect(lambda _: self.remember_view())
        window.clusters_panel.k.valueChanged.connect(lambda _: self.remember_view())

    def images_changed(self) -> None:
        w, s = self.w, self.session
        w.images_panel.thumbs.set_images(s.working, s.data.paths)
        w.images_panel.set_summary(s.data.summary() if s.n else "No images.", len(s.data.skipped))
        w.weights_view.set_names(s.data.paths)
        w.transform_panel.clear_image()
        w.run_panel.clusters.setMaximum(max(1, s.n))
        w.run_panel.set_phase_flip_problem(flip_problem(s.data.ctf, s.data.images, paths=s.data.paths))
        if w.run_panel.size.value() != s.size:
            w.run_panel.show_size(s.size)

    def transforms_changed(self) -> None:
        self.w.images_panel.thumbs.update_images(self.session.working)
        if self.session.book is not None:
            self.w.images_panel.thumbs.set_labels(self.session.book.labels)
        self.update_preview()

    def thumb_selection(self, *_) -> None:
        rows = sorted(i.row() for i in self.w.images_panel.view.selectionModel().selectedIndexes())
        self.session.select(rows)
        if len(rows) == 2:
            self.w.inspect_pair(rows[0], rows[1])

    def selection_changed(self, sel) -> None:
        w, s = self.w, self.session
        self._select_thumbnails(sel)
        w.clusters_panel.show_selected(s.selected_clusters)  # highlighted: the clusters of exactly these images
        w.convergence_view.select(sel)
        w.weights_view.set_selection(sel)
        w.means_view.set_selection(sel, None if s.book is None else np.asarray(s.book.labels))
        if sel:
            t = s.transforms[sel[0]]
            w.transform_panel.load_image(display_name(s.data.paths[sel[0]]), float(np.rad2deg(t[0])),
                                         float(t[1]), float(t[2]))
            self.update_preview()

    def _select_thumbnails(self, sel) -> None:
        view, thumbs = self.w.images_panel.view, self.w.images_panel.thumbs
        current = sorted(i.row() for i in view.selectionModel().selectedIndexes())
        if current == sorted(sel):
            return
        qs = QItemSelection()
        for i in sel:
            qs.select(thumbs.index(i), thumbs.index(i))
        view.selectionModel().blockSignals(True)
        view.selectionModel().select(qs, QItemSelectionModel.SelectionFlag.ClearAndSelect)
        view.selectionModel().blockSignals(False)
        view.viewport().update()
        if sel:
            view.scrollTo(thumbs.index(sel[0]))

    def update_preview(self) -> None:
        s = self.session
        if 0 <= s.selected < s.n:
            src = s.base if self.w.transform_panel.show_original.isChecked() else s.working
            self.w.transform_panel.set_preview(src[s.selected])

    def clusters_changed(self) -> None:
        s, book = self.session, self.session.book
        self.w.images_panel.thumbs.set_labels(None if book is None else book.labels)
        means = {}
        shown = self.with_book(s.final)
        if book is not None and shown is not None and shown.cluster_means is not None:
            means = dict(zip(shown.cluster_ids, shown.cluster_means))  # the same means the views draw
        self.w.clusters_panel.set_book(book, means, s.selected_clusters)  # the selection's clusters
        if s.final is None:
            self.w.clusters_panel.show_evidence(None)  # no "Run: 4 clusters …" of a run that was discarded
        self.w.update_title()
        self.drawn = None  # the views draw the edited clusters
        self.redraw()
        if s.final is not None and s.final is s.latest:
            self.w.compare_view.show_final(self.with_book(s.final), s.data.labels if s.data.has_labels else None)

    def with_book(self, frame):
        """``frame`` drawn with the session's edited clusters (:func:`book_frame`) when there are any."""
        s, book = self.session, self.session.book
        if (frame is None or book is None or book.n != len(frame.snapshot.labels)
                or len(s.working) != book.n):
            return frame
        return book_frame(frame, book.labels, book.names, images=s.working, means=s.cluster_means,
                          undenoised_means=s.undenoised_cluster_means)

    def redraw(self) -> None:
        """Draw the latest frame if it is new, or the frame the scrubber picks (the timer calls this at <= 30 fps)."""
        w, frames = self.w, self.session.frames
        w.scrubber.set_count(len(frames), lambda i: _describe(frames[i]))
        picked = w.scrubber.chosen()
        frame = self.session.latest if picked is None else frames[picked]
        key = (id(frame), picked is not None)
        if frame is self.drawn and key == self._drawn_key:
            return
        self.drawn, self._drawn_key = frame, key
        if frame is None:  # the data changed: stale views go back to their hints
            for view in (w.weights_view, w.means_view, w.convergence_view, w.compare_view):
                view.clear()
            if self.session.busy:
                self.show_waiting()
            return
        frame = self.with_book(frame)
        w.weights_view.show_frame(frame, levels=None if picked is None else self.run_levels(frames))
        w.means_view.show_frame(frame)
        w.convergence_view.show_frame(frame)
        w.convergence_view.select(self.session.selection)
        self.redraws += 1

    def show_waiting(self) -> None:
        """While a run computes its first frame, the views say what is coming (not "open a folder")."""
        for name, text in WAITING.items():
            getattr(self.w, name).show_waiting(text)

    def run_levels(self, frames) -> tuple[float, float]:
        """W's colour scale fixed over the whole run (computed once per set of recorded frames)."""
        key = (len(frames), id(frames[0]) if frames else None, id(frames[-1]) if frames else None)
        if self._levels[0] != key:
            self._levels = (key, weight_range(frames))
        return self._levels[1]

    def finished(self, frame) -> None:
        self.redraw()
        s = self.session
        self.w.clusters_panel.show_evidence(frame.result, s.data.paths)
        self.w.compare_view.show_final(self.with_book(frame), s.data.labels if s.data.has_labels else None)

    def project_opened(self, project) -> None:
        """The Run panel shows the opened project's run settings (none saved: left as they are)."""
        self.w.size_after_demo = None  # the project has its own working size
        if project.parameters:
            self.w.run_panel.set_options(project.parameters)
        view = project.parameters.get("view")  # the window as it was saved: one mean per cluster, the k to read
        view = view if isinstance(view, dict) else {}
        if isinstance(view.get("run_panel"), dict):
            self.w.run_panel.restore_settings(view["run_panel"], partial=True)
        if isinstance(view.get("per_cluster"), bool):
            self.w.means_view.per_cluster.setChecked(view["per_cluster"])
        averages = self.w.means_view.averages
        if view.get("class_averages") in ("denoised", "undenoised"):  # saved since the app showed both
            averages.setCurrentIndex(averages.findData(view["class_averages"]))
        cp, k = self.w.clusters_panel, view.get("k")
        if k == "auto" or (isinstance(k, int) and not isinstance(k, bool) and 1 <= k <= cp.k.maximum()):
            cp.k_auto.setChecked(k == "auto")
            if k != "auto":
                cp.k.setValue(k)

    def remember_view(self) -> None:
        """Keep how the window shows the work in the session (saved with the project): one mean per
        cluster or per image, which class averages (denoised or before denoising), the Clusters tab's k,
        and the Run panel's settings as the user left them."""
        cp = self.w.clusters_panel
        self.session.view_state.update(per_cluster=self.w.means_view.per_cluster.isChecked(),
                                         class_averages=self.w.means_view.averages.currentData(),
                                         k="auto" if cp.k_auto.isChecked() else cp.k.value(),
                                         run_panel=self.w.run_panel.settings_state())

    def show_inspect(self, info) -> None:
        self.w.inspect_view.show_pair(info)
        show_view(self.w, self.w.inspect_view)  # in front of its tabs (left closed if the user closed it)

    def select_cluster_of_label(self, label) -> None:
        if self.session.book is not None:
            lab = np.asarray(self.session.book.labels)
        else:
            lab = self.session.latest.snapshot.labels if self.session.latest is not None else None
        if lab is not None:
            self.session.select(np.flatnonzero(lab == label).tolist())


def _describe(frame) -> str:
    snap = frame.snapshot
    return f"it. {snap.iteration}, {snap.stage}"
