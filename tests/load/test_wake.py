"""``--low-latency``: the CPUs held out of idle while the load runs (cardgen.load.wake)."""

from __future__ import annotations

import struct
from pathlib import Path

from cardgen.load.wake import DEVICE, HELD, NOT_HELD, CpusAwake, not_held_warnings, why_not_held


def limit_us() -> int:
    """The machine's CPU wake-latency limit now, in microseconds, as the kernel reads it back (2,000,000,000: none
    asked)."""
    with DEVICE.open("rb") as fh:
        return int(struct.unpack("=i", fh.read(4))[0])


def test_not_asked_nothing_is_opened_and_nothing_is_said(tmp_path: Path) -> None:
    device = tmp_path / "qos"
    device.write_bytes(b"")
    with CpusAwake(False, device=device) as awake:
        assert not awake.held and awake.words is None
    assert device.read_bytes() == b""


def test_held_it_writes_a_limit_of_0_us_and_lets_go_on_close(tmp_path: Path) -> None:
    device = tmp_path / "qos"
    device.write_bytes(b"")
    with CpusAwake(True, device=device) as awake:
        assert awake.held and awake.words is not None and awake.words.startswith(HELD)
        assert why_not_held(awake.words) is None
        assert struct.unpack("=i", device.read_bytes()) == (0,)
    assert not awake.held and awake.fd is None


def test_a_machine_without_the_device_says_why_and_the_load_goes_on(tmp_path: Path) -> None:
    with CpusAwake(True, device=tmp_path / "absent") as awake:
        assert not awake.held
        assert awake.words == f"{NOT_HELD}{tmp_path / 'absent'} could not be opened (this kernel has no PM QoS device)"
        assert why_not_held(awake.words) == f"{tmp_path / 'absent'} could not be opened (this kernel has no PM QoS device)"
    with CpusAwake(True, device=tmp_path) as awake:  # a folder: any other OSError, in one line
        assert not awake.held and awake.words is not None and "IsADirectoryError" in awake.words


def test_on_this_machine_the_kernel_holds_every_cpu_at_0_us_while_it_is_held() -> None:
    """The real PM QoS device (CI runs as root): reading it gives the machine's limit now, which is 0 while held."""
    with CpusAwake(True) as awake:
        if DEVICE.exists():
            assert awake.held, awake.words
            assert limit_us() == 0
        else:
            assert awake.words is not None and "no PM QoS device" in awake.words


def test_a_hold_asked_for_and_not_had_is_a_warning_naming_where() -> None:
    refused = f"{NOT_HELD}/dev/cpu_dma_latency could not be opened (it needs root)"
    held = f"{HELD}/dev/cpu_dma_latency at 0 us while the load ran"
    assert not_held_warnings([("this machine", None), ("load worker w1's host", held),
                              ("load worker w2's host", refused)]) == [
        "--low-latency could not hold load worker w2's host's CPUs awake: /dev/cpu_dma_latency could not be opened "
        "(it needs root); its sends left as late as an idle CPU woke"]
    assert not_held_warnings([("this machine", held)]) == []
