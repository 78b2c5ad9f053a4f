"""Clusters as named bins that a person can edit.

A :class:`ClusterBook` holds one cluster id per image (``-1`` = unassigned)
and a name per cluster.  Every edit returns a new book, so an undo stack can
keep the before and after states.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["UNASSIGNED", "ClusterBook", "letters"]

UNASSIGNED = -1


def letters(j: int) -> str:
    """The ``j``-th name in "a", "b", ..., "z", "aa", "ab", ..., as spreadsheet columns are named.

    Parameters
    ----------
    j : int
        Which name, from 0.

    Returns
    -------
    str
        Lower-case letters: the suffix of a split cluster's parts.
    """
    name = ""
    j += 1
    while j:
        j, r = divmod(j - 1, 26)
        name = chr(ord("a") + r) + name
    return name


@dataclass(frozen=True)
class ClusterBook:
    """Cluster assignments and names.

    Attributes
    ----------
    labels : tuple of int
        Cluster id per image; ``-1`` is "unassigned".
    names : dict
        ``{cluster id: name}`` for every cluster id in use.
    """

    labels: tuple
    names: dict = field(default_factory=dict)

    @classmethod
    def from_labels(cls, labels, names=None) -> ClusterBook:
        """A book from read-out labels, clusters named "Cluster 1", "Cluster 2", ..."""
        labels = tuple(int(x) for x in np.asarray(labels).ravel())
        ids = sorted({x for x in labels if x != UNASSIGNED})
        given = dict(names or {})
        return cls(labels, {c: given.get(c, f"Cluster {c + 1}") for c in ids})

    # ------------------------------------------------------------- queries
    @property
    def n(self) -> int:
        return len(self.labels)

    def array(self) -> np.ndarray:
        return np.asarray(self.labels, dtype=int)

    def cluster_ids(self) -> list[int]:
        return sorted(self.names)

    def members(self, cluster: int) -> np.ndarray:
        return np.flatnonzero(self.array() == cluster)

    def clusters_of(self, indices) -> list[int]:
        """The clusters whose images are exactly ``indices`` together (``UNASSIGNED`` too, last).

        ``[]`` when ``indices`` is empty or is not a union of whole clusters (part of a cluster):
        a list of clusters is highlighted only while exactly their images are selected.
        """
        arr = self.array()
        chosen = np.zeros(arr.size, dtype=bool)
        idx = np.asarray(list(indices), dtype=int)
        if not idx.size:
            return []
        chosen[idx[(idx >= 0) & (idx < arr.size)]] = True
        hit = sorted({int(c) for c in np.unique(arr[chosen])}, key=lambda c: (c == UNASSIGNED, c))
        covered = np.isin(arr, hit)
        return hit if np.array_equal(covered, chosen) else []

    def members_of(self, clusters) -> np.ndarray:
        """The images of ``clusters`` (``UNASSIGNED`` too), in image order."""
        return np.flatnonzero(np.isin(self.array(), [int(c) for c in clusters]))

    def counts(self) -> dict:
        arr = self.array()
        out = {c: int((arr == c).sum()) for c in self.cluster_ids()}
        out[UNASSIGNED] = int((arr == UNASSIGNED).sum())
        return out

    def name_of(self, cluster: int) -> str:
        return "Unassigned" if cluster == UNASSIGNED else self.names.get(cluster, f"Cluster {cluster + 1}")

    def _new_id(self) -> int:
        return max(self.names, default=-1) + 1

    # ------------------------------------------------------------- edits (all return a new book)
    def move(self, indices, cluster: int) -> ClusterBook:
        """Move images to ``cluster`` (``-1``: unassigned); empty clusters disappear."""
        if cluster != UNASSIGNED and cluster not in self.names:
            raise KeyError(f"no cluster {cluster}")
        arr = self.array()
        arr[np.asarray(list(indices), dtype=int)] = cluster
        return self._with(arr, dict(self.names))

    def rename(self, cluster: int, name: str) -> ClusterBook:
        name = str(name).strip()
        if cluster not in self.names:
            raise KeyError(f"no cluster {cluster}")
        if not name:
            raise ValueError("a cluster name cannot be empty")
        names = dict(self.names)
        names[cluster] = name
        return ClusterBook(self.labels, names)

    def merge(self, clusters) -> ClusterBook:
        """Merge ``clusters`` into the first of them (which keeps its name)."""
        clusters = [int(c) for c in clusters]
        if len(clusters) < 2:
            raise ValueError("choose at least two clusters to merge")
        for c in clusters:
            if c not in self.names:
                raise KeyError(f"no cluster {c}")
        arr = self.array()
        arr[np.isin(arr, clusters[1:])] = clusters[0]
        return self._with(arr, dict(self.names))

    def split(self, cluster: int, sublabels) -> ClusterBook:
        """Split ``cluster`` by ``sublabels`` (one per member, in member order).

        The first sub-cluster keeps the id and name; the others get new ids
        named "<name> a", "<name> b", ... "<name> z", "<name> aa", ...
        """
        members = self.members(cluster)
        sub = np.asarray(sublabels, dtype=int)
        if sub.shape != members.shape:
            raise ValueError("one sub-label per member is needed")
        arr = self.array()
        names = dict(self.names)
        base = self.names[cluster]
        new_id = self._new_id()
        for k, s in enumerate(sorted(set(sub.tolist()))):
            if k == 0:
                arr[members[sub == s]] = cluster
                continue
            arr[members[sub == s]] = new_id
            names[new_id] = f"{base} {letters(k - 1)}"
            new_id += 1
        return self._with(arr, names)

    def new_cluster(self, indices, name: str | None = None) -> ClusterBook:
        """Put ``indices`` in a new cluster."""
        cid = self._new_id()
        names = dict(self.names)
        names[cid] = name or f"Cluster {cid + 1}"
        arr = self.array()
        arr[np.asarray(list(indices), dtype=int)] = cid
        return self._with(arr, names)

    def _with(self, arr, names) -> ClusterBook:
        used = set(arr.tolist())
        return ClusterBook(tuple(int(x) for x in arr), {c: v for c, v in names.items() if c in used})

    # ------------------------------------------------------------- storage
    def to_json(self) -> dict:
        return {"labels": list(self.labels), "names": {str(k): v for k, v in self.names.items()}}

    @classmethod
    def from_json(cls, data: dict, n: int | None = None) -> ClusterBook:
        labels = tuple(int(x) for x in data["labels"])
        if n is not None and len(labels) != n:
            raise ValueError(f"{len(labels)} cluster labels for {n} images")
        used = set(labels) - {UNASSIGNED}
        names = {int(k): str(v) for k, v in data.get("names", {}).items()}
        names = {c: v for c, v in names.items() if c in used}  # a name without images is no cluster
        for c in used:
            names.setdefault(c, f"Cluster {c + 1}")
        return cls(labels, names)
