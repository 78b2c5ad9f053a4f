"""Running the heavy stages as tasks on a ``dask.distributed`` cluster.

``--dask local:N`` starts a :class:`~dask.distributed.LocalCluster` of ``N``
worker processes on this machine; ``--dask tcp://host:8786`` joins a
scheduler started with the standard commands (``dask scheduler`` on one
node, ``dask worker tcp://host:8786`` on every node, or ``dask-jobqueue`` on
SLURM).  Two kinds of task run there:

* chunks of image pairs of the invariant similarity
  (:func:`iastudio.core.similarity.align_pair_chunk`);
* groups of invariant-mean columns (:func:`iastudio.core.invariant_mean.invariant_mean_step`).

Each task computes exactly what the same chunk computes in a local run, so
the results match a single-process run.  The images go to the workers once
per stage (``scatter``); a task that fails (a worker died) is retried by
Dask on another worker, and a failure it cannot recover raises here - a run
never finishes with a missing chunk.  ``dask[distributed]`` is the optional
extra ``[dask]``; nothing here is imported unless a client is asked for.

Trust: a scheduler runs the tasks it is sent, and Dask believes what its peer says (the length of
every message it reads, the objects it unpickles), so point ``--dask`` only at a scheduler you (or
your cluster's administrators) started, on a network you trust.  Before a client is made,
:func:`probe_scheduler` reads the scheduler's first message over plain TCP with a timeout and at
most :data:`MAX_HANDSHAKE_BYTES`: a port that answers anything else (another service, random
bytes, a length meant to make the client allocate exabytes) is refused there.  This filters wrong
addresses; it does not make an untrusted scheduler safe.
"""
from __future__ import annotations

import logging
import time

from .extras import missing_extra

__all__ = ["MAX_HANDSHAKE_BYTES", "DaskUnavailableError", "connect", "map_chunks", "n_workers", "probe_scheduler"]

log = logging.getLogger(__name__)

_CONNECT_TIMEOUT_S = 10
MAX_HANDSHAKE_BYTES = 1 << 16  # a Dask handshake is a few hundred bytes
_RETRIES = 2


class DaskUnavailableError(RuntimeError):
    """The cluster cannot be used: Dask missing, a bad address, or nothing answering there."""


def _import_distributed():
    try:
        import distributed
    except ImportError as exc:
        raise DaskUnavailableError(missing_extra("Dask", extra="dask")) from exc
    return distributed


def connect(address: str, *, timeout: float = _CONNECT_TIMEOUT_S):
    """A ``dask.distributed.Client`` for ``address``.

    Parameters
    ----------
    address : str
        ``"local:N"`` starts a local cluster of ``N`` single-threaded worker
        processes; ``"tcp://host:port"`` (or ``host:port``) joins a running
        scheduler.
    timeout : float
        Seconds to wait for the scheduler.

    Returns
    -------
    distributed.Client
        Close it (``client.close()``; a local cluster goes with it).

    Raises
    ------
    DaskUnavailableError
        Dask is not installed, the address is malformed or nothing answers
        there within ``timeout`` seconds (the message names the address).
    """
    address = str(address).strip()  # a malformed address is said to be so, with or without Dask
    if address.startswith("local:") or address == "local":
        text = address.partition(":")[2] or "2"
        try:
            n = int(text)
        except ValueError:
            raise DaskUnavailableError(f"--dask {address}: local:N needs a whole number of workers") from None
        if n < 1:
            raise DaskUnavailableError(f"--dask {address}: local:N needs at least one worker")
        distributed = _import_distributed()
        cluster = distributed.LocalCluster(n_workers=n, threads_per_worker=1, processes=True,
                                           dashboard_address=None)
        client = distributed.Client(cluster, timeout=timeout)
        client._ia_owns_cluster = cluster
        return client
    if "://" not in address:
        if ":" not in address:
            raise DaskUnavailableError(f"--dask {address!r}: expected local:N or tcp://host:port")
        address = "tcp://" + address
    distributed = _import_distributed()
    if address.startswith("tcp://"):
        probe_scheduler(address, timeout=timeout)
    try:
        return distributed.Client(address, timeout=timeout)
    except (OSError, TimeoutError) as exc:
        raise DaskUnavailableError(f"no Dask scheduler answered at {address} within {timeout:g} s") from exc


def probe_scheduler(address: str, *, timeout: float = _CONNECT_TIMEOUT_S) -> None:
    """Read a Dask scheduler's handshake at ``tcp://host:port`` before a client trusts the address.

    A Dask server speaks first: a message of 8-byte little-endian lengths (the message's own, then its
    frames') and a few hundred bytes.  Every length is checked against :data:`MAX_HANDSHAKE_BYTES`
    before anything is read into memory, and the whole exchange against ``timeout``.

    Raises
    ------
    DaskUnavailableError
        Naming the address: nothing answers, it answers too slowly, or what it says is not a Dask
        handshake.
    """
    import socket
    import struct

    host, _, port = address.removeprefix("tcp://").rpartition(":")
    host = host.strip("[]")
    try:
        port_number = int(port)
        if not 0 < port_number < 65536:
            raise ValueError
    except ValueError:
        raise DaskUnavailableError(f"--dask {address}: expected tcp://host:port with a port from 1 to 65535") from None

    def refuse(why):
        log.info("dask probe of %s: %s", address, why)
        return DaskUnavailableError(f"{address} is not a Dask scheduler ({why}); refused before connecting")

    deadline = time.monotonic() + timeout

    def read(sock, n):
        data = bytearray()
        while len(data) < n:
            sock.settimeout(max(0.01, deadline - time.monotonic()))
            chunk = sock.recv(min(n - len(data), 65536))
            if not chunk:
                raise refuse("it closed the connection")
            data += chunk
        return bytes(data)

    try:
        with socket.create_connection((host, port_number), timeout=timeout) as sock:
            (size,) = struct.unpack("<Q", read(sock, 8))
            if not 16 <= size <= MAX_HANDSHAKE_BYTES:
                raise refuse(f"its first message claims {size:,} bytes")
            head = read(sock, size)
            (n_frames,) = struct.unpack_from("<Q", head)
            if not 1 <= n_frames <= 64 or 8 * (n_frames + 1) > size:
                raise refuse("its first message is not one")
            lengths = struct.unpack_from(f"<{n_frames}Q", head, 8)
            if sum(lengths) > MAX_HANDSHAKE_BYTES:
                raise refuse(f"its first message claims {sum(lengths):,} bytes")
            if sum(lengths) > size - 8 * (n_frames + 1):
                read(sock, sum(lengths) - (size - 8 * (n_frames + 1)))  # frames sent after the first part
    except TimeoutError:
        raise DaskUnavailableError(f"no Dask scheduler answered at {address} within {timeout:g} s") from None
    except OSError as exc:
        raise DaskUnavailableError(f"no Dask scheduler answered at {address} "
                                   f"({exc.strerror or type(exc).__name__})") from None


def close(client) -> None:
    """Close a client from :func:`connect` (and the local cluster it started)."""
    cluster = getattr(client, "_ia_owns_cluster", None)
    client._ia_shared = None
    client.close()
    if cluster is not None:
        cluster.close()


def n_workers(client) -> int:
    """Workers connected to the scheduler now (at least 1)."""
    return max(1, len(client.scheduler_info().get("workers", {})))


def map_chunks(client, func, chunk_args, shared, options=None, *, progress=None):
    """Run ``func(shared, *args, **options)`` for each ``args`` in ``chunk_args`` on the cluster.

    Parameters
    ----------
    client : distributed.Client
    func : callable
        Importable on the workers (a function of :mod:`core`).
    chunk_args : list of tuple
        One task per tuple.
    shared : object
        Sent to the workers once and passed as ``func``'s first argument; the
        same object in the next call is not sent again.
    options : dict, optional
        Keyword arguments of every call.
    progress : callable(fraction), optional

    Returns
    -------
    list
        ``(span, result)`` pairs in the order of ``chunk_args``; ``span`` is
        the ``(lo, hi)`` range of ``args[0]`` within the concatenated chunks.

    Raises
    ------
    RuntimeError
        A task failed after Dask's retries (a worker kept dying, or the
        computation raised): nothing partial is returned.
    """
    distributed = _import_distributed()
    options = dict(options or {})
    results = [None] * len(chunk_args)
    pending = list(range(len(chunk_args)))
    done = 0
    for _attempt in range(_RETRIES + 1):
        cached = getattr(client, "_ia_shared", None)
        if cached is not None and cached[0] is shared:  # the same images again (every mean step): sent once
            shared_f = cached[1]
        else:
            [shared_f] = client.scatter([shared], broadcast=True, hash=False)
            client._ia_shared = (shared, shared_f)
        futures = {client.submit(func, shared_f, *chunk_args[i], pure=False, retries=_RETRIES, **options): i
                   for i in pending}
        lost = []
        try:
            for fut in distributed.as_completed(list(futures)):
                i = futures[fut]
                if fut.status == "finished":
                    results[i] = fut.result()
                    done += 1
                    if progress is not None:
                        progress(done / len(chunk_args))
                elif fut.status == "error":  # the computation itself raised, after Dask's retries
                    exc = fut.exception()
                    raise RuntimeError(f"a Dask task failed after {_RETRIES} retries: {exc}") from exc
                else:  # cancelled or lost with a dying worker (its copy of the shared data, say)
                    lost.append(i)
        finally:
            client.cancel(list(futures))
        if not lost:
            break
        log.warning("%d Dask tasks were lost (a worker died?); resubmitting them", len(lost))
        client._ia_shared = None  # send the shared data again
        pending = lost
    else:
        raise RuntimeError(f"Dask tasks were lost {_RETRIES + 1} times (workers kept dying); stopped")
    spans, lo = [], 0
    for args in chunk_args:
        size = len(args[0])
        spans.append((lo, lo + size))
        lo += size
    return list(zip(spans, results))
