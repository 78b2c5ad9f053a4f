"""A napari plugin: cluster the images of a stack layer by Invariant Attention (optional extra ``[napari]``).

The dock widget "Cluster by Invariant Attention" (:class:`~iastudio.app.napari.widget.ClusterWidget`) is
declared in this package's ``napari.yaml`` (an npe2 manifest, found through the ``napari.manifest``
entry point).  napari stays optional: nothing else in the package imports this one.
"""
