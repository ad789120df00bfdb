"""Checkpoint files: durable atomic writes, and reading them back without running pickled code.

Writing (:func:`write_atomically`): the content goes to ``<file>.tmp``, which is flushed
to the disk (``fsync``) before it is renamed over ``<file>``; the directory is synced after
the rename, so that the new name survives a power cut. With ``keep_previous`` the file
being replaced is first renamed to ``<stem>.prev<ext>`` (``checkpoint.pt`` ->
``checkpoint.prev.pt``): at every instant at least one complete checkpoint exists (before
the first rename the old ``checkpoint.pt``; between the two renames ``checkpoint.prev.pt``;
after them both). A save that fails leaves the files it would have replaced untouched
and removes its temporary file. A temporary file left by a crash (``kill -9``, power
cut) is an *orphan*: :func:`remove_orphans` deletes them when a run starts.

Reading (:func:`read_checkpoint`): ``torch.load(..., weights_only=True)``, which rebuilds
tensors and plain Python values only and never executes code from the file, so a
checkpoint from elsewhere cannot run anything. The content is therefore written in plain
types (:func:`to_plain`): tensors, numbers, strings, None, lists, tuples and dicts; numpy
arrays become tensors and numpy scalars Python numbers; random states are converted by
:func:`encode_numpy_rng` / :func:`decode_numpy_rng` and their Python counterparts.

Every problem with a file is a :class:`CheckpointError` with a one-line cause; its
``damaged`` flag separates a file that cannot be read (empty, truncated, random bytes,
failed checksum) from a readable one that does not fit (another format, another network).

Format history (``FORMAT``, the ``format`` entry of every checkpoint):

1. pytorchrl <= 0.2.0: pickled numpy arrays (random states); needs ``weights_only=False``.
2. Plain types only (this module), plus the algorithm and actor class names (checked on
   loading) and the numpy generators of the actor.
"""

import collections
import errno
import glob
import os
import pickletools
import random
import shutil
import zipfile

import numpy as np
import torch

#: Version of the checkpoint content written by this code (see the module docstring).
FORMAT = 2
#: Suffix of the temporary file a save writes before renaming it.
TMP_SUFFIX = ".tmp"


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used, with a one-line cause.

    Parameters
    ----------
    path : str
        The file.
    cause : str
        What is wrong with it, in one line (no file name).
    damaged : bool
        True when the file cannot be read at all (empty, truncated, not a checkpoint,
        failed checksum): an older copy may be used instead. False when it is readable but
        unusable here (another format, another algorithm or network).
    """

    def __init__(self, path, cause, damaged=False):
        super().__init__(f"{path}: {cause}")
        self.path = path
        self.cause = cause
        self.damaged = damaged


class SaveError(OSError):
    """Writing a file failed (disk full, directory not writable, ...); the files it would
    have replaced are intact. The message is one line naming the file and the cause."""


# ------------------------------------------------------------------------ writing
def previous_path(path):
    """Where ``write_atomically(..., keep_previous=True)`` keeps the replaced file:
    ``dir/checkpoint.pt`` -> ``dir/checkpoint.prev.pt``."""
    root, ext = os.path.splitext(path)
    return f"{root}.prev{ext}"


def fsync_file(path):
    """Flush the content of the file at ``path`` to the disk."""
    # Opened for writing (without truncating): Windows refuses to flush a read-only handle.
    fd = os.open(path, os.O_RDWR)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(directory):
    """Flush a directory's entries (renames) to the disk, where the system allows it."""
    if not hasattr(os, "O_DIRECTORY"):
        return  # Windows: directories cannot be opened; NTFS journals renames itself.
    fd = os.open(directory or ".", os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    except OSError as exc:
        # Some file systems (certain network mounts) cannot sync a directory: the rename
        # itself is still atomic, only its durability across a power cut is the system's.
        if exc.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EBADF):
            raise
    finally:
        os.close(fd)


def write_atomically(write, path, keep_previous=False):
    """Write a file so that ``path`` always holds a complete version.

    Parameters
    ----------
    write : callable
        ``write(tmp_path)`` writes the whole content to ``tmp_path``.
    path : str
        Final file name.
    keep_previous : bool
        Keep the file being replaced as ``previous_path(path)`` (replacing the one kept
        before it).

    Returns
    -------
    str
        ``path``.

    Raises
    ------
    SaveError
        When writing, syncing or renaming fails (``OSError``, or torch's ``RuntimeError``
        for a failed write); the temporary file is removed and ``path`` (or, when the
        failure hit between the two renames, ``previous_path(path)``) holds the last
        complete version.
    """
    tmp = path + TMP_SUFFIX
    try:
        write(tmp)
        fsync_file(tmp)
        if keep_previous and os.path.exists(path):
            os.replace(path, previous_path(path))
        os.replace(tmp, path)
        fsync_dir(os.path.dirname(path))
    except (OSError, RuntimeError) as exc:
        try:
            os.remove(tmp)
        except OSError:
            pass  # never written, or the directory refuses writes (the error below says why)
        raise SaveError(f"cannot write {path}: {_write_failure(exc, path)}") from exc
    return path


def _write_failure(exc, path):
    """One line saying why writing ``path`` failed."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    detail = (str(exc).splitlines() or [type(exc).__name__])[0]
    # torch.save given a file name reports a full disk as "[enforce fail at
    # inline_container.cc] unexpected pos ...": the free space tells the user what it means.
    try:
        free = shutil.disk_usage(os.path.dirname(path) or ".").free
    except OSError:
        return detail
    return f"{detail} ({free / 2 ** 20:,.0f} MiB free on its file system)"


def remove_orphans(directory, names):
    """Delete the temporary files of ``names`` in ``directory`` left by an interrupted save.

    Parameters
    ----------
    directory : str
        Directory of the files (a run directory).
    names : iterable of str
        File names written with ``write_atomically`` (their temporary name is the name
        followed by ``TMP_SUFFIX``).

    Returns
    -------
    list of str
        Names of the files removed.
    """
    removed = []
    for name in names:
        # Also "<name>.<pid>.tmp" (pytorchrl.tools.process_tmp_path: files two processes may
        # write at once), but only a dead process's: a live one may be about to rename it.
        found = [name + TMP_SUFFIX]
        for path in sorted(glob.glob(os.path.join(glob.escape(directory), glob.escape(name) + ".*" + TMP_SUFFIX))):
            pid = os.path.basename(path)[len(name) + 1:-len(TMP_SUFFIX)]
            if pid.isdigit() and not _another_live_process(int(pid)):
                found.append(os.path.basename(path))
        for tmp in found:
            if os.path.isfile(os.path.join(directory, tmp)):
                os.remove(os.path.join(directory, tmp))
                removed.append(tmp)
    return removed


def _another_live_process(pid):
    """Whether ``pid`` is the id of a process other than this one, alive on this machine."""
    if pid == os.getpid():
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:     # alive, another user's
        return True
    return True


def save_torch(obj, path, keep_previous=False):
    """``torch.save(obj)`` to ``path`` through ``write_atomically``; returns ``path``.

    ``obj`` must hold plain types only (see ``to_plain``), so that ``read_torch`` can load it.
    """
    def write(tmp):
        # Through a Python file: a full disk is then an OSError (ENOSPC) with its plain
        # message, where torch's own file writer raises an obscure RuntimeError.
        with open(tmp, "wb") as f:
            torch.save(obj, f)
    return write_atomically(write, path, keep_previous)


# ------------------------------------------------------------------- plain content
_SCALARS = (bool, int, float, complex, str, bytes, type(None), torch.dtype, torch.Size, torch.device)


def to_plain(obj, where="checkpoint"):
    """``obj`` with numpy values converted to what ``torch.load(weights_only=True)`` reads.

    numpy arrays become tensors and numpy scalars Python numbers; tensors, Python numbers,
    strings, None, and lists, tuples, sets and dicts of these pass (subclasses, such as
    enums or named tuples, become their plain base type). Containers that need no
    conversion are returned as they are (a module's state dict keeps its ``_metadata``).

    Parameters
    ----------
    obj : object
        Content of a checkpoint (or a part of it).
    where : str
        Its place in the checkpoint, for the error message (e.g. ``extra.config``).

    Raises
    ------
    TypeError
        For any other type, naming where it is: it could only be stored as pickled code.
    """
    if type(obj) in _SCALARS or isinstance(obj, torch.Tensor):
        return obj
    for base in (bool, int, float, str):
        if isinstance(obj, base):   # an enum or another subclass: its class would be pickled
            return base(obj)
    if isinstance(obj, np.ndarray):
        if obj.dtype == object:
            return to_plain(obj.tolist(), where)
        # (ascontiguousarray makes a 0-d array 1-d: its shape is given back.)
        array = np.ascontiguousarray(obj).reshape(obj.shape)
        # A read-only array (as Ray hands them over) would make a tensor torch warns about.
        return torch.from_numpy(array if array.flags.writeable else array.copy())
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, dict):
        items = {k: to_plain(v, f"{where}.{k}") for k, v in obj.items()}
        for k in items:
            if not isinstance(k, (str, int, float, bool, type(None))):
                raise TypeError(f"{where}: key {k!r} of type {type(k).__name__} cannot be saved in a checkpoint")
        if type(obj) in (dict, collections.OrderedDict) and all(items[k] is obj[k] for k in obj):
            return obj
        if type(obj) is collections.OrderedDict:
            out = collections.OrderedDict(items)
            if hasattr(obj, "_metadata"):   # a module's state dict: load_state_dict reads it
                out._metadata = obj._metadata
            return out
        return items   # other mapping types would need their class: a plain dict
    if isinstance(obj, (list, tuple, set, frozenset)):
        items = [to_plain(v, f"{where}[{i}]") for i, v in enumerate(obj)]
        plain = type(obj) in (list, tuple, set)   # not a namedtuple, frozenset or other subclass
        if plain and all(a is b for a, b in zip(items, obj)):
            return obj
        return type(obj)(items) if plain else list(items)
    raise TypeError(f"{where}: a {type(obj).__module__}.{type(obj).__qualname__} cannot be saved in a checkpoint "
                    f"read without executing code (use tensors, numbers, strings, lists and dicts)")


def encode_numpy_rng(state):
    """``np.random.get_state()`` (a tuple holding an array) as a dict of plain values."""
    kind, keys, pos, has_gauss, cached_gaussian = state
    return {"bit_generator": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "pos": int(pos),
            "has_gauss": int(has_gauss), "cached_gaussian": float(cached_gaussian)}


def decode_numpy_rng(state):
    """The tuple for ``np.random.set_state`` from ``encode_numpy_rng``'s dict."""
    return (state["bit_generator"], state["keys"].numpy().astype(np.uint32), state["pos"], state["has_gauss"],
            state["cached_gaussian"])


def encode_python_rng(state):
    """``random.getstate()`` as lists."""
    version, internal, gauss_next = state
    return [version, list(internal), gauss_next]


def decode_python_rng(state):
    """The tuple for ``random.setstate`` from ``encode_python_rng``'s list."""
    version, internal, gauss_next = state
    return version, tuple(internal), gauss_next


def generator_states(obj):
    """States of the numpy ``Generator`` attributes of ``obj`` (e.g. an actor's sampling
    generator), as ``{attribute name: bit_generator.state}`` (plain dicts and ints)."""
    return {name: value.bit_generator.state for name, value in sorted(vars(obj).items())
            if isinstance(value, np.random.Generator)}


def set_generator_states(obj, states, where):
    """Restore ``generator_states`` output on ``obj``.

    Parameters
    ----------
    obj : object
        Holder of the generators (an actor).
    states : dict
        ``{attribute name: bit_generator.state}``.
    where : str
        Name of ``obj`` for the error message.

    Raises
    ------
    ValueError
        When ``obj`` has a generator that ``states`` does not hold or the reverse: the
        randomness would silently differ from the saved run's.
    """
    mine = generator_states(obj)
    if set(mine) != set(states):
        raise ValueError(f"the random generators of the {where} ({', '.join(sorted(mine)) or 'none'}) are not "
                         f"those saved ({', '.join(sorted(states)) or 'none'})")
    for name, state in states.items():
        getattr(obj, name).bit_generator.state = state


def process_rng_state():
    """The random states of this process (torch, CUDA when in use, numpy, Python), in plain types."""
    state = {"torch": torch.get_rng_state(), "numpy": encode_numpy_rng(np.random.get_state()),
             "python": encode_python_rng(random.getstate())}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        # On a GPU, mini-batch shuffling (randperm on the device) draws from these.
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_process_rng_state(state):
    """Restore ``process_rng_state`` output (the CUDA states where this process has as many GPUs)."""
    torch.set_rng_state(state["torch"])
    np.random.set_state(decode_numpy_rng(state["numpy"]))
    random.setstate(decode_python_rng(state["python"]))
    cuda = state.get("cuda")
    if cuda and torch.cuda.is_available() and torch.cuda.device_count() == len(cuda):
        torch.cuda.set_rng_state_all(cuda)


# ------------------------------------------------------------------------ reading
def _zip_problem(path):
    """Why ``path`` is not a complete zip archive as ``torch.save`` writes, or None."""
    with open(path, "rb") as f:
        head = f.read(4)
    if not head:
        return "the file is empty (a save was interrupted, or the disk was full)"
    if not zipfile.is_zipfile(path):
        if head == b"PK\x03\x04":
            return "the file is truncated (the archive has no end: an interrupted copy or save?)"
        return "the file is not an archive written by torch.save (damaged, or another kind of file)"
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()   # reads every member and checks its CRC
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as exc:
        return f"the archive is damaged ({' '.join(str(exc).split())})"
    if bad is not None:
        return f"the file is damaged: member {bad} fails its checksum"
    return None


def peek_format(path):
    """The ``format`` entry of a checkpoint read without unpickling it (None if not found).

    Reads the pickle's opcodes only (``pickletools.genops``, which executes nothing), so it
    can tell the format of a checkpoint that ``weights_only`` loading refuses.
    """
    try:
        with zipfile.ZipFile(path) as archive:
            name = next((n for n in archive.namelist() if n.endswith("data.pkl")), None)
            if name is None:
                return None
            data = archive.read(name)
        previous = None
        for i, (op, arg, _) in enumerate(pickletools.genops(data)):
            if op.name in ("BINPUT", "LONG_BINPUT", "PUT", "MEMOIZE"):
                continue   # memo bookkeeping between a key and its value
            if previous == "format" and isinstance(arg, int) and "INT" in op.name:
                return arg
            previous = arg if isinstance(arg, str) else None
            if i > 20:   # "format" is the first key of every pytorchrl checkpoint
                return None
    except Exception:  # noqa: BLE001 - a guess for a message: any failure means "unknown"
        return None
    return None


def read_torch(path, what="file"):
    """``torch.load(path, weights_only=True)`` on the CPU, with one-line errors.

    Parameters
    ----------
    path : str
        File written by ``torch.save``.
    what : str
        What the file should be, for messages (e.g. "checkpoint", "model").

    Raises
    ------
    CheckpointError
        ``damaged`` when the file is missing, empty, truncated, not an archive or fails
        a checksum; not ``damaged`` when it holds objects that loading without running
        code refuses.
    """
    if not os.path.exists(path):
        raise CheckpointError(path, "no such file", damaged=True)
    try:
        problem = _zip_problem(path)
    except OSError as exc:
        raise CheckpointError(path, f"cannot read the file: {exc.strerror or exc}", damaged=True) from None
    if problem:
        raise CheckpointError(path, problem, damaged=True)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as exc:  # noqa: BLE001 - classified below, reported in one line
        text = " ".join(str(exc).split())
        if "Weights only load failed" in text:
            raise CheckpointError(path, f"the {what} holds objects that can only be loaded by executing code "
                                        f"from the file (refused: weights_only loading)") from None
        raise CheckpointError(path, f"the file is damaged ({type(exc).__name__}: {text[:200]})",
                              damaged=True) from None


def read_checkpoint(path):
    """The content of a pytorchrl checkpoint, checked for its format.

    Parameters
    ----------
    path : str
        A file written by ``Learner.save_checkpoint``.

    Returns
    -------
    dict
        The checkpoint (plain values; random states still encoded).

    Raises
    ------
    CheckpointError
        Missing, damaged, not a pytorchrl checkpoint, or of another format.
    """
    try:
        state = read_torch(path, "checkpoint")
    except CheckpointError as exc:
        if not exc.damaged:
            old = peek_format(path)
            if old is not None and old < FORMAT:
                raise CheckpointError(path, f"written by an older pytorchrl (checkpoint format {old}; this "
                                            f"version reads format {FORMAT}, which loads without executing code "
                                            f"from the file): resume it with the version that wrote it, or start "
                                            f"a new run") from None
        raise
    if not isinstance(state, dict) or "format" not in state:
        raise CheckpointError(path, "not a pytorchrl checkpoint (no format entry)")
    if state["format"] != FORMAT:
        newer = isinstance(state["format"], int) and state["format"] > FORMAT
        raise CheckpointError(path, f"written by {'a newer' if newer else 'another'} pytorchrl (checkpoint format "
                                    f"{state['format']!r}; this version reads format {FORMAT})")
    return state


__all__ = ["FORMAT", "CheckpointError", "SaveError", "previous_path", "write_atomically", "remove_orphans",
           "save_torch", "to_plain", "read_torch", "read_checkpoint", "peek_format", "generator_states",
           "set_generator_states", "process_rng_state", "set_process_rng_state", "fsync_file", "fsync_dir"]
