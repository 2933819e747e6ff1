"""The seccomp filter of ``exec --sandbox bwrap``, loaded into a real process on this kernel.

The filter under test answers refused calls with EHWPOISON (133) instead of EPERM,
and sockets of a refused family with EKEYREJECTED (129) instead of EAFNOSUPPORT:
errnos no kernel path gives these calls, so every refusal seen here is the
filter's and not the kernel's. The probing process has no capabilities (as
root: an empty bounding set): had the filter let a call through, the kernel
would refuse the privileged ones.
The rest of the architectures (aarch64, an unknown ABI) are checked by
running the same program through a small classic-BPF interpreter.
"""

from __future__ import annotations

import errno
import json
import os
import platform
import struct
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from broker.host import seccomp
from broker.host.sandbox import SETPRIV

MARK = 133  # EHWPOISON (memory page has hardware error)
FAMILY_MARK = 129  # EKEYREJECTED (key was rejected by service)
AF_VSOCK, AF_NETLINK, AF_PACKET, AF_ALG = 40, 16, 17, 38
HIGH = 1 << 32  # the family is an int: the kernel reads the low 32 bits of the argument, and so must the filter
SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET = 1, 2, 3, 5
FAMILIES = {  # socket(family, type, protocol)
    "unix": (seccomp.AF_UNIX, SOCK_STREAM, 0),
    "inet": (seccomp.AF_INET, SOCK_STREAM, 0),
    "inet6": (seccomp.AF_INET6, SOCK_DGRAM, 0),
    "inet-high-bits": (HIGH | seccomp.AF_INET, SOCK_STREAM, 0),
    "vsock": (AF_VSOCK, SOCK_STREAM, 0),
    "vsock-high-bits": (HIGH | AF_VSOCK, SOCK_STREAM, 0),
    "netlink": (AF_NETLINK, SOCK_RAW, 0),
    "packet": (AF_PACKET, SOCK_DGRAM, 0),
    "alg": (AF_ALG, SOCK_SEQPACKET, 0),
    "unspec": (0, SOCK_STREAM, 0),
    "unassigned": (45, SOCK_STREAM, 0),
}
REFUSED_FAMILIES = {"vsock", "vsock-high-bits", "netlink", "packet", "alg", "unspec", "unassigned"}
ARCH = next((a for a in seccomp.ARCHES if a.name == platform.machine()), None)
needs_known_arch = pytest.mark.skipif(ARCH is None, reason=f"no syscall table for {platform.machine()}")

CHILD = textwrap.dedent(
    """
    import ctypes, json, os, subprocess, sys, threading

    libc = ctypes.CDLL(None, use_errno=True)
    numbers = json.loads(sys.argv[2])

    def call(number, *args):
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
        return ctypes.get_errno() if result == -1 else "ok"

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_char_p)]

    code = bytes.fromhex(sys.argv[1])
    buffer = ctypes.create_string_buffer(code, len(code))
    program = Program(len(code) // 8, ctypes.cast(buffer, ctypes.c_char_p))
    assert libc.prctl(38, 1, 0, 0, 0) == 0  # PR_SET_NO_NEW_PRIVS
    assert libc.prctl(22, 2, ctypes.byref(program), 0, 0) == 0, ctypes.get_errno()  # SECCOMP_MODE_FILTER

    out = {"refused": {name: call(number, -1, -1, -1, -1, -1, -1) for name, number in numbers["refused"].items()}}
    out["clone_newuser"] = call(numbers["clone"], 0x10000000 | 17, 0, 0, 0, 0) if numbers["refused"] else None
    out["clone3"] = call(numbers["clone3"], 0, 0)
    out["x32_getpid"] = call(0x40000000 | 39, 0) if numbers["x32"] else None
    out["getpid"] = call(numbers["getpid"]) == "ok"

    pair = (ctypes.c_int * 2)()
    def opened(number, *args):  # a call that returns descriptors: close what it opened
        ctypes.set_errno(0)
        result = libc.syscall(ctypes.c_long(number), *[ctypes.c_long(a) for a in args])
        if result == -1:
            return ctypes.get_errno()
        for fd in (pair[0], pair[1]) if number == numbers["socketpair"] else (result,):
            os.close(fd)
        return "ok"

    sockets = numbers["families"].items()
    out["socket"] = {name: opened(numbers["socket"], *args) for name, args in sockets}
    pairs = {name: args for name, args in sockets if name in ("unix", "inet", "netlink", "vsock")}
    out["socketpair"] = {name: opened(numbers["socketpair"], *a, ctypes.addressof(pair)) for name, a in pairs.items()}
    params = ctypes.create_string_buffer(120)  # struct io_uring_params, zeroed
    out["io_uring_setup"] = opened(numbers["io_uring_setup"], 4, ctypes.addressof(params))
    pid = os.fork()
    if pid == 0:
        os._exit(7)
    out["fork"] = os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])
    seen = []
    thread = threading.Thread(target=seen.append, args=(1,))
    thread.start()
    thread.join()
    out["thread"] = seen
    out["subprocess"] = subprocess.run(["/bin/sh", "-c", "exit 3"]).returncode
    print(json.dumps(out))
    """
)


def run_filtered(program: bytes, arch: seccomp.Arch, *, refused: bool = True) -> dict[str, Any]:
    """What the probes got under ``program``; ``refused=False``: not the refused calls (unfiltered, a clone
    into a new user namespace would succeed and run the rest twice)."""
    numbers = {
        "refused": {
            name: pair[arch.column]
            for name, pair in seccomp.REFUSED.items()
            if pair[arch.column] is not None and refused
        },
        "clone": seccomp.CLONE[arch.column],
        "clone3": seccomp.CLONE3[arch.column],
        "getpid": {"x86_64": 39, "aarch64": 172}[arch.name],
        "x32": arch.x32_bit,
        "socket": seccomp.SOCKET[arch.column],
        "socketpair": seccomp.SOCKETPAIR[arch.column],
        "io_uring_setup": seccomp.REFUSED["io_uring_setup"][arch.column],
        "families": FAMILIES,
    }
    no_caps = [SETPRIV, "--bounding-set=-all", "--inh-caps=-all"] if os.geteuid() == 0 else []
    result = subprocess.run(
        [*no_caps, sys.executable, "-I", "-c", CHILD, program.hex(), json.dumps(numbers)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd="/",
    )
    assert result.returncode == 0, result.stderr
    document: dict[str, Any] = json.loads(result.stdout)
    return document


@needs_known_arch
def test_every_refused_call_is_answered_by_the_filter_and_ordinary_work_goes_on() -> None:
    assert ARCH is not None
    out = run_filtered(seccomp.filter_program(refused_errno=MARK), ARCH)
    assert {name: e for name, e in out["refused"].items() if e != MARK} == {}
    assert len(out["refused"]) >= 35
    assert out["clone_newuser"] == MARK  # no new user namespace through clone either
    assert out["clone3"] == errno.ENOSYS  # its flags cannot be read: the C library falls back to clone
    if ARCH.x32_bit:
        assert out["x32_getpid"] == errno.ENOSYS  # the x32 syscall table is no way around the filter
    assert out["getpid"] is True
    assert (out["fork"], out["thread"], out["subprocess"]) == (7, [1], 3)


@needs_known_arch
def test_io_uring_and_every_socket_family_but_unix_and_inet_are_refused_by_the_filter() -> None:
    """vsock is no network-namespace resource: only the filter keeps a sandbox from the hypervisor's sockets."""
    assert ARCH is not None
    out = run_filtered(seccomp.filter_program(refused_errno=MARK, family_errno=FAMILY_MARK), ARCH)
    assert out["io_uring_setup"] == MARK
    assert {name for name, result in out["socket"].items() if result == FAMILY_MARK} == REFUSED_FAMILIES
    assert {name: out["socket"][name] for name in ("unix", "inet", "inet6", "inet-high-bits")} == dict.fromkeys(
        ("unix", "inet", "inet6", "inet-high-bits"), "ok"
    )
    assert out["socketpair"]["unix"] == "ok"
    assert out["socketpair"]["netlink"] == out["socketpair"]["vsock"] == FAMILY_MARK
    assert out["socketpair"]["inet"] == errno.EOPNOTSUPP  # allowed by the filter, refused by the kernel as ever


@needs_known_arch
def test_without_the_filter_the_same_probes_reach_the_kernel() -> None:
    """The control: on this kernel netlink sockets and (unless disabled) io_uring work for anyone."""
    assert ARCH is not None
    allow_all = struct.pack("=HBBI", seccomp.BPF_RET_K, 0, 0, seccomp.SECCOMP_RET_ALLOW)
    out = run_filtered(allow_all, ARCH, refused=False)
    assert out["socket"]["netlink"] == "ok" and out["socketpair"]["unix"] == "ok"
    assert FAMILY_MARK not in out["socket"].values() and out["socketpair"]["netlink"] == errno.EOPNOTSUPP
    if Path("/proc/sys/kernel/io_uring_disabled").read_text().strip() == "0":
        assert out["io_uring_setup"] == "ok"


@needs_known_arch
def test_the_production_filter_refuses_a_socket_family_with_eafnosupport() -> None:
    assert ARCH is not None
    out = run_filtered(seccomp.filter_program(), ARCH)
    assert {out["socket"][name] for name in REFUSED_FAMILIES} == {errno.EAFNOSUPPORT}
    assert out["io_uring_setup"] == errno.EPERM


@needs_known_arch
def test_the_production_filter_refuses_with_eperm() -> None:
    assert ARCH is not None
    out = run_filtered(seccomp.filter_program(), ARCH)
    assert set(out["refused"].values()) == {errno.EPERM}
    assert out["clone_newuser"] == errno.EPERM


# -- the program itself, for every architecture it knows ----------------------------------------

SECCOMP_DATA = struct.Struct("=iIQ6Q")


def interpret(program: bytes, nr: int, arch: int, arg0: int = 0) -> int:
    """A classic-BPF interpreter for the four instructions the filter uses."""
    data = SECCOMP_DATA.pack(nr, arch, 0, arg0, 0, 0, 0, 0, 0)
    insns: list[tuple[int, int, int, int]] = [
        struct.unpack_from("=HBBI", program, at) for at in range(0, len(program), 8)
    ]
    pc, acc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == seccomp.BPF_LD_W_ABS:
            acc = int(struct.unpack_from("=I", data, k)[0])
            pc += 1
        elif code == seccomp.BPF_JEQ_K:
            pc += 1 + (jt if acc == k else jf)
        elif code == seccomp.BPF_JSET_K:
            pc += 1 + (jt if acc & k else jf)
        elif code == seccomp.BPF_RET_K:
            return k
        else:
            raise AssertionError(f"unexpected instruction {code:#x}")


@pytest.mark.parametrize("arch", seccomp.ARCHES, ids=lambda a: a.name)
def test_the_program_for_each_architecture(arch: seccomp.Arch) -> None:
    program = seccomp.filter_program()
    eperm = seccomp.SECCOMP_RET_ERRNO | errno.EPERM
    for name, pair in seccomp.REFUSED.items():
        number = pair[arch.column]
        if number is not None:
            assert interpret(program, number, arch.audit) == eperm, name
    clone = seccomp.CLONE[arch.column]
    assert interpret(program, clone, arch.audit, 0x10000000 | 17) == eperm  # CLONE_NEWUSER
    assert interpret(program, clone, arch.audit, 0x00020000 | 17) == eperm  # CLONE_NEWNS
    assert interpret(program, clone, arch.audit, 0x01200011) == seccomp.SECCOMP_RET_ALLOW  # glibc's fork
    assert interpret(program, clone, arch.audit, 0x003D0F00) == seccomp.SECCOMP_RET_ALLOW  # pthread_create
    assert interpret(program, seccomp.CLONE3[arch.column], arch.audit) == seccomp.SECCOMP_RET_ERRNO | errno.ENOSYS
    for allowed in (0, 1, 2, 3, 63, 64, 93, 172, 221, 222):  # read, write, exit, getpid, execve... on both
        if allowed not in {pair[arch.column] for pair in seccomp.REFUSED.values()} | {clone}:
            assert interpret(program, allowed, arch.audit) == seccomp.SECCOMP_RET_ALLOW, allowed
    eafnosupport = seccomp.SECCOMP_RET_ERRNO | errno.EAFNOSUPPORT
    for call in (seccomp.SOCKET[arch.column], seccomp.SOCKETPAIR[arch.column]):
        for family in range(64):
            expected = seccomp.SECCOMP_RET_ALLOW if family in (1, 2, 10) else eafnosupport
            assert interpret(program, call, arch.audit, family) == expected, (call, family)
            assert interpret(program, call, arch.audit, HIGH | family) == expected, (call, family)
    for name in ("io_uring_setup", "io_uring_enter", "io_uring_register"):
        assert interpret(program, seccomp.REFUSED[name][arch.column] or -1, arch.audit) == eperm, name


def test_an_unknown_abi_is_killed() -> None:
    program = seccomp.filter_program()
    for audit_arch in (0x40000003, 0x40000028):  # i386 and arm: the 32-bit compat ABIs
        assert interpret(program, 26, audit_arch) == seccomp.SECCOMP_RET_KILL_PROCESS


def test_the_program_fd_is_sealed_and_reads_from_the_start() -> None:
    with seccomp.program_fd() as fd:
        assert os.read(fd, 1 << 16) == seccomp.filter_program()
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"\0" * 8, 0)


def test_the_calls_the_contract_names_are_in_the_filter() -> None:
    named = {"ptrace", "mount", "umount2", "unshare", "setns", "keyctl", "add_key", "request_key", "bpf"}
    named |= {"perf_event_open", "userfaultfd", "pivot_root", "kexec_load", "init_module", "finit_module"}
    named |= {"io_uring_setup", "io_uring_enter", "io_uring_register"}
    assert named <= set(seccomp.REFUSED)
    assert seccomp.SOCKET_FAMILIES == (1, 2, 10)  # AF_UNIX, AF_INET, AF_INET6: an allow-list
