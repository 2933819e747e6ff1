"""The seccomp filter of ``exec --sandbox bwrap``: refuse the system calls a sandboxed agent never needs.

Refused with EPERM: debugging other processes (``ptrace``,
``process_vm_readv/writev``), mounting (``mount``, ``umount2``,
``pivot_root``, ``chroot`` and the new mount API), namespaces (``unshare``,
``setns``, and ``clone`` with any ``CLONE_NEW*`` flag, so no new user
namespace), the kernel keyring (``keyctl``, ``add_key``, ``request_key``),
``bpf``, ``perf_event_open``, ``userfaultfd``, kernel modules and kexec,
``open_by_handle_at``, swap, reboot, ``acct``, ``quotactl``, ``syslog``,
``iopl``/``ioperm``, and io_uring (``io_uring_setup/enter/register``: a
second way into the kernel whose operations, sockets included, no filter
sees; EPERM is also what the kernel's own ``io_uring_disabled`` answers).
``clone3`` passes its flags in memory a filter cannot read, so it gets
ENOSYS and the C library falls back to ``clone`` (as Docker and Flatpak do).

Sockets are an allow-list: ``socket()`` and ``socketpair()`` work for
``AF_UNIX``, ``AF_INET`` and ``AF_INET6`` only; every other family
(``AF_VSOCK``, which no network namespace confines, ``AF_NETLINK``,
``AF_PACKET``, ``AF_ALG``... and the ones a kernel module would be loaded
for) gets EAFNOSUPPORT, as from a kernel built without it, so the C library
falls back as it does there (``getaddrinfo`` without netlink assumes both
address families). The family is an ``int``: the kernel reads only the low
32 bits of the argument, and so does the filter. Everything else is allowed.

The program is classic BPF built here (``struct sock_filter``, 8 bytes per
instruction) rather than through libseccomp: the only PyPI binding
(``pyseccomp``) has had no release since 2021 and libseccomp's own bindings
are not on PyPI; the filter is one fixed list, checked by the tests against
the running kernel. It knows x86_64 and aarch64; a call from any other ABI
(i386 or arm32 compat, or x86_64's x32, whose numbers have bit 30 set) kills
the process or gets ENOSYS, so no syscall table can be used to go around it.
bwrap reads it from an inherited file descriptor (``--seccomp FD``).
"""

from __future__ import annotations

import errno
import fcntl
import os
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

# classic BPF opcodes
BPF_LD_W_ABS = 0x20  # BPF_LD | BPF_W | BPF_ABS
BPF_JEQ_K = 0x15  # BPF_JMP | BPF_JEQ | BPF_K
BPF_JSET_K = 0x45  # BPF_JMP | BPF_JSET | BPF_K
BPF_RET_K = 0x06  # BPF_RET | BPF_K

SECCOMP_RET_KILL_PROCESS = 0x80000000
SECCOMP_RET_ERRNO = 0x00050000
SECCOMP_RET_ALLOW = 0x7FFF0000

# struct seccomp_data: int nr; __u32 arch; __u64 instruction_pointer; __u64 args[6]
OFFSET_NR = 0
OFFSET_ARCH = 4
OFFSET_ARG0_LOW = 16  # little-endian: the low 32 bits of args[0]

AUDIT_ARCH_X86_64 = 0xC000003E
AUDIT_ARCH_AARCH64 = 0xC00000B7
X32_SYSCALL_BIT = 0x40000000

CLONE_NEWNS = 0x00020000
CLONE_NEWCGROUP = 0x02000000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
CLONE_NAMESPACES = (
    CLONE_NEWNS | CLONE_NEWCGROUP | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET
)

# name -> (x86_64, aarch64); None where the architecture has no such call
REFUSED: dict[str, tuple[int | None, int | None]] = {
    "ptrace": (101, 117),
    "process_vm_readv": (310, 270),
    "process_vm_writev": (311, 271),
    "mount": (165, 40),
    "umount2": (166, 39),
    "pivot_root": (155, 41),
    "chroot": (161, 51),
    "open_tree": (428, 428),
    "move_mount": (429, 429),
    "fsopen": (430, 430),
    "fsconfig": (431, 431),
    "fsmount": (432, 432),
    "fspick": (433, 433),
    "mount_setattr": (442, 442),
    "open_tree_attr": (467, 467),
    "unshare": (272, 97),
    "setns": (308, 268),
    "keyctl": (250, 219),
    "add_key": (248, 217),
    "request_key": (249, 218),
    "bpf": (321, 280),
    "perf_event_open": (298, 241),
    "userfaultfd": (323, 282),
    "kexec_load": (246, 104),
    "kexec_file_load": (320, 294),
    "init_module": (175, 105),
    "finit_module": (313, 273),
    "delete_module": (176, 106),
    "open_by_handle_at": (304, 265),
    "swapon": (167, 224),
    "swapoff": (168, 225),
    "reboot": (169, 142),
    "acct": (163, 89),
    "quotactl": (179, 60),
    "syslog": (103, 116),
    "lookup_dcookie": (212, 18),
    "fanotify_init": (300, 262),
    "iopl": (172, None),
    "ioperm": (173, None),
    "io_uring_setup": (425, 425),
    "io_uring_enter": (426, 426),
    "io_uring_register": (427, 427),
}
CLONE = (56, 220)
CLONE3 = (435, 435)
SOCKET = (41, 198)
SOCKETPAIR = (53, 199)
AF_UNIX, AF_INET, AF_INET6 = 1, 2, 10
SOCKET_FAMILIES = (AF_UNIX, AF_INET, AF_INET6)  # the only families a sandboxed command may open


@dataclass(frozen=True)
class Arch:
    name: str
    audit: int
    column: int  # index into the REFUSED tuples
    x32_bit: bool  # whether numbers with X32_SYSCALL_BIT belong to another ABI


ARCHES = (
    Arch("x86_64", AUDIT_ARCH_X86_64, 0, True),
    Arch("aarch64", AUDIT_ARCH_AARCH64, 1, False),
)


@dataclass(frozen=True)
class _Insn:
    code: int
    k: int
    true: str | None = None  # jump labels, resolved when assembled
    false: str | None = None


def _ld(offset: int) -> _Insn:
    return _Insn(BPF_LD_W_ABS, offset)


def _ret(value: int) -> _Insn:
    return _Insn(BPF_RET_K, value)


def _section(arch: Arch, refused_errno: int, family_errno: int) -> list[tuple[str | None, _Insn]]:
    """The checks of one architecture; its first instruction is labelled with its name."""
    out: list[tuple[str | None, _Insn]] = [(arch.name, _ld(OFFSET_NR))]
    deny, nosys, clone = f"{arch.name}-deny", f"{arch.name}-nosys", f"{arch.name}-clone"
    family, allow = f"{arch.name}-family", f"{arch.name}-family-allowed"
    if arch.x32_bit:
        out.append((None, _Insn(BPF_JSET_K, X32_SYSCALL_BIT, nosys, None)))
    for numbers in REFUSED.values():
        number = numbers[arch.column]
        if number is not None:
            out.append((None, _Insn(BPF_JEQ_K, number, deny, None)))
    out.append((None, _Insn(BPF_JEQ_K, CLONE3[arch.column], nosys, None)))
    out.append((None, _Insn(BPF_JEQ_K, CLONE[arch.column], clone, None)))
    out.append((None, _Insn(BPF_JEQ_K, SOCKET[arch.column], family, None)))
    out.append((None, _Insn(BPF_JEQ_K, SOCKETPAIR[arch.column], family, None)))
    out.append((None, _ret(SECCOMP_RET_ALLOW)))
    out.append((clone, _ld(OFFSET_ARG0_LOW)))
    out.append((None, _Insn(BPF_JSET_K, CLONE_NAMESPACES, deny, None)))
    out.append((None, _ret(SECCOMP_RET_ALLOW)))
    out.append((family, _ld(OFFSET_ARG0_LOW)))  # the family: an int, the low half of the argument
    out += [(None, _Insn(BPF_JEQ_K, allowed, allow, None)) for allowed in SOCKET_FAMILIES]
    out.append((None, _ret(SECCOMP_RET_ERRNO | family_errno)))
    out.append((allow, _ret(SECCOMP_RET_ALLOW)))
    out.append((deny, _ret(SECCOMP_RET_ERRNO | refused_errno)))
    out.append((nosys, _ret(SECCOMP_RET_ERRNO | errno.ENOSYS)))
    return out


def _assemble(listing: list[tuple[str | None, _Insn]]) -> bytes:
    where = {label: index for index, (label, _) in enumerate(listing) if label is not None}
    program = bytearray()
    for index, (_, insn) in enumerate(listing):
        jumps = []
        for target in (insn.true, insn.false):
            offset = 0 if target is None else where[target] - index - 1
            if not 0 <= offset <= 255:
                raise ValueError(f"jump to {target} out of range")
            jumps.append(offset)
        program += struct.pack("=HBBI", insn.code, jumps[0], jumps[1], insn.k)
    return bytes(program)


def filter_program(refused_errno: int = errno.EPERM, family_errno: int = errno.EAFNOSUPPORT) -> bytes:
    """The compiled filter: ``struct sock_filter[]`` in the host's byte order.

    ``refused_errno`` is what a refused call returns, ``family_errno`` what a
    socket of a refused family gets (tests pick ones no kernel path returns,
    to tell the filter's answer from the kernel's).
    """
    listing: list[tuple[str | None, _Insn]] = [(None, _ld(OFFSET_ARCH))]
    for arch in ARCHES:
        listing.append((None, _Insn(BPF_JEQ_K, arch.audit, arch.name, None)))
    listing.append((None, _ret(SECCOMP_RET_KILL_PROCESS)))  # an ABI the filter does not know
    for arch in ARCHES:
        listing += _section(arch, refused_errno, family_errno)
    return _assemble(listing)


@contextmanager
def program_fd() -> Iterator[int]:
    """A sealed memory file holding the filter, read from its start; close-on-exec until passed on."""
    fd = os.memfd_create("broker-seccomp", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        data = memoryview(filter_program())
        while data:
            data = data[os.write(fd, data) :]
        os.lseek(fd, 0, os.SEEK_SET)
        fcntl.fcntl(
            fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
        )
        yield fd
    finally:
        os.close(fd)
