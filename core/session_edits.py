"""The session's clusters: selection, undoable cluster edits, re-reading, inspecting a pair (part of ``Session``).

Every cluster edit is one undoable step (:class:`EditHistory` of :class:`Edit`).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from . import options
from .cluster_means import cluster_key
from .clusterbook import UNASSIGNED, ClusterBook
from .clustering import labels_at_threshold, read_clusters, split_labels
from .frames import edited_clusters
from .wording import count_of


@dataclass(frozen=True)
class Edit:
    """One undoable cluster edit."""

    text: str
    before: ClusterBook
    after: ClusterBook


class EditHistory:
    """Undo/redo of cluster edits: a list of :class:`Edit` and the position in it."""

    def __init__(self):
        self.edits: list[Edit] = []
        self.index = 0

    def push(self, edit: Edit) -> None:
        del self.edits[self.index:]
        self.edits.append(edit)
        self.index = len(self.edits)

    def clear(self) -> None:
        self.edits, self.index = [], 0

    @property
    def can_undo(self) -> bool:
        return self.index > 0

    @property
    def can_redo(self) -> bool:
        return self.index < len(self.edits)

    @property
    def undo_text(self) -> str:
        return self.edits[self.index - 1].text if self.can_undo else ""

    @property
    def redo_text(self) -> str:
        return self.edits[self.index].text if self.can_redo else ""

    def undo(self) -> Edit | None:
        if not self.can_undo:
            return None
        self.index -= 1
        return self.edits[self.index]

    def redo(self) -> Edit | None:
        if not self.can_redo:
            return None
        self.index += 1
        return self.edits[self.index - 1]



class SessionClusters:
    """The selection, the cluster book and its undoable edits (a part of ``Session``)."""

    # ------------------------------------------------------------------ selection
    def select(self, indices) -> None:
        """Select images (an index, a list of indices, or -1/[] for none), shared by every view."""
        if isinstance(indices, (int, np.integer)):
            indices = [] if indices < 0 else [int(indices)]
        sel = [int(i) for i in dict.fromkeys(indices) if 0 <= int(i) < self.n]
        if sel != self.selection:
            self.selection = sel
            self.events.selection.emit(sel)

    def select_cluster(self, cluster: int) -> None:
        if self.book is not None:
            self.select(self.book.members(cluster).tolist())

    def select_clusters(self, clusters) -> None:
        """Select the images of ``clusters`` (``[]``: none)."""
        if self.book is not None:
            self.select(self.book.members_of(clusters).tolist())

    @property
    def selected_clusters(self) -> list[int]:
        """The clusters whose images are exactly the selection (:meth:`ClusterBook.clusters_of`).

        The image selection is what every view shows; a list of clusters highlights these and no
        others, so after a merge, split, re-read, undo or redo the highlighted clusters are always
        the selected images' (``[]`` while the selection is part of a cluster, or empty).
        """
        if self.book is None or self.book.n != self.n:
            return []
        return self.book.clusters_of(self.selection)

    # ------------------------------------------------------------------ clusters (undoable)
    def edit_clusters(self, text: str, new_book: ClusterBook) -> bool:
        """Replace the clusters by ``new_book`` as one undoable edit called ``text``."""
        if self.book is None or new_book == self.book:
            return False
        self.history.push(Edit(text, self.book, new_book))
        self._apply_book(new_book)
        self.edits.append(text)
        self.events.history.emit()
        self._mark_dirty()
        self.message(f"{text}{self._clusters_now()}")  # not the run's count
        return True

    def undo(self) -> bool:
        edit = self.history.undo()
        if edit is None:
            return False
        self._apply_book(edit.before)
        if self.edits:
            self.edits.pop()
        self.events.history.emit()
        self._mark_dirty()
        self.message(f"Undid: {edit.text}{self._clusters_now()}")
        return True

    def redo(self) -> bool:
        edit = self.history.redo()
        if edit is None:
            return False
        self._apply_book(edit.after)
        self.edits.append(edit.text)
        self.events.history.emit()
        self._mark_dirty()
        self.message(f"Redid: {edit.text}{self._clusters_now()}")
        return True

    def _clusters_now(self) -> str:
        """`` (4 clusters now)`` after an edit, undo or redo (the status bar would show the run's count)."""
        return "" if self.book is None else f" ({count_of(len(self.book.cluster_ids()), 'cluster')} now)"

    def _apply_book(self, book: ClusterBook | None) -> None:
        self.book = book
        self.events.clusters.emit()

    def move_images(self, indices, cluster: int) -> bool:
        if self.book is None or not len(indices):
            return False
        n = len(indices)
        to = "Unassigned" if cluster == UNASSIGNED else self.book.name_of(cluster)
        return self.edit_clusters(f"Move {count_of(n, 'image')} to {to}", self.book.move(indices, cluster))

    def rename_cluster(self, cluster: int, name: str) -> bool:
        if self.book is None:
            return False
        try:
            return self.edit_clusters(f"Rename {self.book.name_of(cluster)} to {name}",
                                      self.book.rename(cluster, name))
        except ValueError as exc:
            self.message(str(exc))
            return False

    def merge_clusters(self, clusters) -> bool:
        if self.book is None or len(clusters) < 2:
            self.message("Select two or more clusters to merge.")
            return False
        return self.edit_clusters(f"Merge {len(clusters)} clusters", self.book.merge(clusters))

    def new_cluster_from_selection(self) -> bool:
        if self.book is None or not self.selection:
            self.message("Select images first.")
            return False
        return self.edit_clusters(f"New cluster from {len(self.selection)} images",
                                  self.book.new_cluster(self.selection))

    def split_cluster(self, cluster: int, k: int) -> bool:
        """Split a cluster into ``k`` by spectral clustering of its members' input distances."""
        res = self.result
        if self.book is None or res is None:
            self.message("Run first: clusters are split using a run's distances.")
            return False
        members = self.book.members(cluster)
        if len(members) < k:
            self.message(f"Cannot split {len(members)} images into {k}.")
            return False
        sub = split_labels(res.input_distances, members, k=k)
        return self.edit_clusters(f"Split {self.book.name_of(cluster)} into {k}", self.book.split(cluster, sub))

    def reread(self, *, k=None, threshold: float | None = None) -> bool:
        """Relabel from the run's distances: ``k`` clusters ("auto" or None: chosen), or a distance threshold."""
        frame = self.final or self.latest
        if frame is None:
            self.message("Run first: clusters are read from a run's result.")
            return False
        d = frame.result.final_distances if frame.result is not None else frame.snapshot.distances
        d = d if sp.issparse(d) else np.asarray(d, float)  # a pruned run above 2,000 images: its graph
        if threshold is not None:
            labels = labels_at_threshold(d, threshold=float(threshold))
            text = f"Re-read clusters at distance {threshold:.3g}"
        else:
            kk = "auto" if k in (None, "auto") else int(k)
            if kk != "auto" and not 1 <= kk <= self.n:
                self.message(f"Cannot read {count_of(self.n, 'image')} as {count_of(kk, 'cluster')}.")
                return False
            labels, _ = read_clusters(d, k=kk)
            text = f"Re-read clusters with k = {kk}"
        new_book = ClusterBook.from_labels(labels)
        if self.book is None:
            self._apply_book(new_book)
            return True
        if not self.edit_clusters(text, new_book):
            self.message(f"{text}: no change ({count_of(len(new_book.cluster_ids()), 'cluster')}, as before)")
            return False
        return True

    # ------------------------------------------------------------------ edited clusters' means, alignment, inspect
    def missing_cluster_means(self) -> list[np.ndarray]:
        """The member lists of edited clusters whose invariant mean is not computed yet (none: ``[]``).

        A front end computes them (:func:`~iastudio.core.cluster_means.edited_cluster_means`, in a
        worker, with :attr:`undenoised` after a denoised run) and gives them to
        :meth:`set_cluster_means`; until then the views show each such cluster's medoid mean.
        """
        if self.final is None or self.book is None or self.book.n != self.n:
            return []
        changed = edited_clusters(self.final, self.book.labels, self.book.cluster_ids())
        return [m for m in changed.values() if cluster_key(m) not in self.cluster_means]

    def alignment_options(self) -> dict:
        """The run's alignment search (``angle_step``, ``rotation_range``), live or saved; ``{}``: the defaults."""
        return options.alignment_options(vars(self.run.settings) if self.run is not None else self._opened_parameters)

    def set_cluster_means(self, members: list, means, undenoised=None) -> None:
        """Keep the invariant means of edited clusters (``means[i]`` of ``members[i]``) and redraw.

        ``undenoised``: after a denoised run, their class averages before denoising
        (:func:`~iastudio.core.cluster_means.edited_cluster_means`), rows as ``means``.
        """
        for i, idx in enumerate(members):
            self.cluster_means[cluster_key(idx)] = np.asarray(means[i], dtype=np.float32)
            if undenoised is not None:
                self.undenoised_cluster_means[cluster_key(idx)] = np.asarray(undenoised[i], dtype=np.float32)
        self.events.clusters.emit()

    def cluster_images(self, cluster: int) -> np.ndarray:
        """The working images of one cluster."""
        return self.working[self.book.members(cluster)]

    def inspect(self, i: int, j: int) -> dict | None:
        """Align image i onto image j: transform, distance, cosine score and the images (also an event)."""
        from .alignment import inspect_pair

        if not (0 <= i < self.n and 0 <= j < self.n):
            return None
        info = inspect_pair(self.working[i], self.working[j], **self.alignment_options())
        info.update(i=i, j=j, name_i=self.data.paths[i], name_j=self.data.paths[j])
        self.events.inspect.emit(info)
        return info
