"""What the Python tests share to count and report their checks, and to skip without PyTorch.

A test runs as `python tests/<file>.py` (tests/ is then on sys.path; tests/fsdp2_conformance adds
it), counts failed checks with check(), and ends with finish(): every failed check is printed
where it fails (`FAIL [rank R]: what`) and any reaches the exit code (1). A missing dependency
ends the test through skip(): `skipped: why` and exit 77, CTest's SKIP_RETURN_CODE here."""
import sys

_failures = 0
_rank = None


def set_rank(rank):
    """Names this process's rank in the failure lines from now on (none before: `FAIL: what`)."""
    global _rank
    _rank = rank


def failure_count():
    """The checks failed so far in this process."""
    return _failures


def check(ok, what):
    """Counts and prints a failed check; returns `ok`."""
    global _failures
    if not ok:
        _failures += 1
        print(f"FAIL [rank {_rank}]: {what}" if _rank is not None else f"FAIL: {what}",
              flush=True)
    return ok


def expect(exc, fragment, fn, *args, **kwargs):
    """fn(...) raises `exc`, an exception type or (libfsdp.Error, status name), whose message
    names `fragment`. Returns the exception raised, None where the call succeeded."""
    kind, status = exc if isinstance(exc, tuple) else (exc, None)
    try:
        fn(*args, **kwargs)
    except kind as e:
        check(fragment in str(e) and (status is None or e.status_name == status),
              f"expected {status or kind.__name__} naming '{fragment}', got {e!r}")
        return e
    check(False, f"expected {status or kind.__name__} naming '{fragment}', but the call "
          "succeeded")
    return None


def expect_error(status_name, fragment, fn, *args, **kwargs):
    """fn(...) raises libfsdp.Error with `status_name`, its message naming `fragment`, and the
    message is the library's last error (fsdp_last_error)."""
    import libfsdp  # here: a test that imports this module first may still load torch first
    e = expect((libfsdp.Error, status_name), fragment, fn, *args, **kwargs)
    if e is not None:
        check(str(e) == libfsdp._lib.fsdp_last_error().decode(), "fsdp_last_error mismatch")


def fail(msg):
    """Fails the check under way by raising (for tests whose checks are functions the caller runs
    and reports, rank by rank agreed)."""
    raise AssertionError(msg)


def check_close(got, want, what, **tol):
    """torch.testing.assert_close, its message led by `what`: raises where they differ."""
    import torch
    torch.testing.assert_close(got, want, msg=lambda m: f"{what}: {m}", **tol)


def finish(what, failed=None, show=True):
    """Ends the test: prints `PASS: what`, or how many checks failed, where `show`; exits 1 on a
    failure, else 0. `failed` replaces this process's count (one the ranks agreed on)."""
    failed = int(_failures if failed is None else failed)
    if show:
        where = f"rank {_rank}: " if _rank is not None else ""
        print(f"{where}FAIL: {failed} check(s) failed" if failed else f"{where}PASS: {what}",
              flush=True)
    sys.exit(1 if failed else 0)


def skip(why):
    """Ends the test as skipped: prints `skipped: why`, exits 77."""
    print(f"skipped: {why}", flush=True)
    sys.exit(77)


def require_torch(min_version=None):
    """PyTorch, or a skip where it is missing or older than `min_version` ((major, minor): the
    fully_shard API, DTensor and FSDP2, came with (2, 6))."""
    try:
        import torch
    except ImportError:
        skip(f"PyTorch is not installed for {sys.executable}")
    if min_version and tuple(int(x) for x in
                             torch.__version__.split("+")[0].split(".")[:2]) < min_version:
        skip(f"PyTorch {torch.__version__} has no DTensor/FSDP2 (>= "
             f"{'.'.join(map(str, min_version))} needed)")
    return torch
