package sandbox

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// filter is what the seccomp filter of a confined command refuses, beyond
// what every command is refused (see seccompProgram).
type filter struct {
	// NoUnix refuses socket(AF_UNIX): with the network off, a command
	// reaches no service of this machine through a socket file either
	// (socketpair, which connects nothing outside, still works).
	NoUnix bool `json:"noUnix,omitempty"`
	// NoInet refuses socket(AF_INET and AF_INET6): with the network off
	// where the command has no network namespace of its own (Landlock
	// without one), so that UDP, which Landlock does not cover, is off too.
	NoInet bool `json:"noInet,omitempty"`
}

// seccomp's return values and the offsets of struct seccomp_data.
const (
	retAllow       = 0x7fff0000 // SECCOMP_RET_ALLOW
	retErrno       = 0x00050000 // SECCOMP_RET_ERRNO | errno
	retKillProcess = 0x80000000 // SECCOMP_RET_KILL_PROCESS
	offNr          = 0
	offArch        = 4
	offArg0        = 16 // the low 32 bits of args[0] (little endian)
	x32Bit         = 0x40000000
)

// seccompProgram is the classic BPF program of f for this machine's
// architecture; nil where mm knows none (commands are then not filtered).
// Every confined command is refused:
//   - system calls of another architecture (a 32-bit program's, whose
//     socketcall cannot be looked into), and x86-64's x32 ones: killed;
//   - io_uring, whose operations (sockets among them) no filter sees;
//   - new user namespaces (unshare, clone with CLONE_NEWUSER; clone3,
//     whose flags are behind a pointer, answers ENOSYS, and the C library
//     falls back to clone), in which a command would hold capabilities.
func seccompProgram(f filter) ([]unix.SockFilter, error) {
	var arch uint32
	switch runtime.GOARCH {
	case "amd64":
		arch = 0xc000003e // AUDIT_ARCH_X86_64
	case "arm64":
		arch = 0xc00000b7 // AUDIT_ARCH_AARCH64
	default:
		return nil, nil
	}
	errno := func(e unix.Errno) bpf.Instruction { return bpf.RetConstant{Val: retErrno | uint32(e)} }
	// Each check loads what it looks at, so that the blocks stand apart.
	nrIs := func(nr uintptr, then bpf.Instruction) []bpf.Instruction {
		return []bpf.Instruction{
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 1},
			then,
		}
	}
	prog := []bpf.Instruction{
		bpf.LoadAbsolute{Off: offArch, Size: 4},
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: arch, SkipTrue: 1},
		bpf.RetConstant{Val: retKillProcess},
	}
	if runtime.GOARCH == "amd64" {
		prog = append(prog,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpLessThan, Val: x32Bit, SkipTrue: 1},
			bpf.RetConstant{Val: retKillProcess})
	}
	prog = append(prog, nrIs(unix.SYS_IO_URING_SETUP, errno(unix.EPERM))...)
	prog = append(prog, nrIs(unix.SYS_CLONE3, errno(unix.ENOSYS))...)
	for _, nr := range []uintptr{unix.SYS_UNSHARE, unix.SYS_CLONE} {
		prog = append(prog,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: uint32(nr), SkipTrue: 3},
			bpf.LoadAbsolute{Off: offArg0, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpBitsNotSet, Val: unix.CLONE_NEWUSER, SkipTrue: 1},
			errno(unix.EPERM))
	}
	var families []uint32
	if f.NoUnix {
		families = append(families, unix.AF_UNIX)
	}
	if f.NoInet {
		families = append(families, unix.AF_INET, unix.AF_INET6)
	}
	if len(families) > 0 {
		prog = append(prog,
			bpf.LoadAbsolute{Off: offNr, Size: 4},
			bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: unix.SYS_SOCKET, SkipTrue: uint8(1 + 2*len(families))},
			bpf.LoadAbsolute{Off: offArg0, Size: 4})
		for _, fam := range families {
			prog = append(prog, bpf.JumpIf{Cond: bpf.JumpNotEqual, Val: fam, SkipTrue: 1}, errno(unix.EACCES))
		}
	}
	prog = append(prog, bpf.RetConstant{Val: retAllow})
	raw, err := bpf.Assemble(prog)
	if err != nil {
		return nil, fmt.Errorf("the seccomp filter: %w", err)
	}
	out := make([]unix.SockFilter, len(raw))
	for i, r := range raw {
		out[i] = unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K}
	}
	return out, nil
}

// seccompBytes is prog as bubblewrap's --seccomp reads it: the struct
// sock_filter array, in the machine's byte order.
func seccompBytes(prog []unix.SockFilter) []byte {
	b := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		b = binary.NativeEndian.AppendUint16(b, in.Code)
		b = append(b, in.Jt, in.Jf)
		b = binary.NativeEndian.AppendUint32(b, in.K)
	}
	return b
}

// installSeccomp applies prog to the calling thread (and what it execs);
// no_new_privs must be set.
func installSeccomp(prog []unix.SockFilter) error {
	if len(prog) == 0 {
		return nil
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if _, _, errno := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, 0, uintptr(unsafe.Pointer(&fprog))); errno != 0 {
		return fmt.Errorf("seccomp: %w", errno)
	}
	return nil
}
