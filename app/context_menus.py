"""Right-click menus on clusters and thumbnails.

They only call what the window and its model already do (rename, merge, split, move, select,
inspect…); nothing here changes clusters by itself. ``cluster_menu`` and ``thumbnail_menu``
build a menu (tests trigger its actions); ``install_context_menus`` pops them up on right-click.
"""
from __future__ import annotations

from PySide6.QtWidgets import QMenu

from iastudio.core.clusterbook import UNASSIGNED
from iastudio.core.wording import count_of

__all__ = ["cluster_menu", "install_context_menus", "thumbnail_menu"]


def _add(menu: QMenu, text: str, slot, enabled: bool = True):
    act = menu.addAction(text)
    act.triggered.connect(lambda _=False: slot())
    act.setEnabled(enabled)
    return act


def cluster_menu(window, cluster: int) -> QMenu:
    """Select its images, rename, merge the selected clusters, split (k from the panel), re-run on it."""
    m, panel = window.model, window.clusters_panel
    menu = QMenu(window)
    book = m.session.book
    if book is None:
        return menu
    name = book.name_of(cluster)
    real = cluster != UNASSIGNED
    idle = m.session.state not in ("running", "stopping", "splitting")
    selected = panel.selected_clusters()
    k = panel.split_k.value()
    _add(menu, f"Select the images of {name}", lambda: m.session.select_cluster(cluster))
    menu.addSeparator()
    _add(menu, f"Rename {name}…", lambda: window.rename_cluster(cluster), real)
    merge = "Merge the selected clusters" if len(selected) < 2 else f"Merge the {len(selected)} selected clusters"
    _add(menu, merge, lambda: window.model.session.merge_clusters(selected),
         len(selected) >= 2)
    _add(menu, f"Split {name} into {k}", lambda: window.model.session.split_cluster(cluster, k),
         real and m.session.final is not None and len(book.members(cluster)) >= k)
    _add(menu, f"Split {name} by re-running IA on it", lambda: m.split_by_rerun(cluster),
         real and idle and len(book.members(cluster)) >= 3)
    return menu


def thumbnail_menu(window, rows: list[int]) -> QMenu:
    """Show large, inspect a pair, remove from the set, select the cluster, move to a cluster, new cluster, unassign."""
    m = window.model
    menu = QMenu(window)
    rows = [int(r) for r in rows if 0 <= int(r) < m.session.n]
    if not rows:
        return menu
    what = count_of(len(rows), "image")
    _add(menu, "Show large…", lambda: window_show_image(window, rows[0]))
    _add(menu, "Inspect this pair (why alike?)", lambda: window.inspect_pair(rows[0], rows[1]), len(rows) == 2)
    _add(menu, f"Remove {what} from the set", lambda: window.remove_images(rows))
    book = m.session.book
    if book is None:
        return menu
    label = book.labels[rows[0]]
    _add(menu, f"Select all of {book.name_of(label)}", lambda: m.session.select_cluster(label), label != UNASSIGNED)
    menu.addSeparator()
    move = menu.addMenu(f"Move {what} to")
    for c in book.cluster_ids():
        _add(move, book.name_of(c), lambda c=c: window.model.session.move_images(rows, c))
    _add(menu, f"New cluster from {what}", lambda: (m.session.select(rows), m.session.new_cluster_from_selection()))
    _add(menu, f"Unassign {what}", lambda: window.model.session.move_images(rows, UNASSIGNED))
    return menu


def window_show_image(window, index: int):
    from .dialogs import show_image

    return show_image(window, index)


def _popup(window, menu: QMenu, pos) -> None:
    window.context_menu = menu  # kept alive while shown; tests read it
    menu.popup(pos)


def install_context_menus(window) -> None:
    """Right-click on a cluster or a thumbnail opens its menu; double-click a thumbnail shows it large."""
    window.context_menu = None
    window.clusters_panel.list.menuRequested.connect(
        lambda cluster, pos: _popup(window, cluster_menu(window, cluster), pos))
    window.images_panel.thumbMenuRequested.connect(
        lambda rows, pos: _popup(window, thumbnail_menu(window, rows), pos))
    window.images_panel.imageActivated.connect(lambda i: window_show_image(window, i))
