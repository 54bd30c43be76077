package controlplane

import "syscall"

// childSysProcAttr puts each child in its own process group and asks the kernel to kill it when
// its parent dies, so an interrupted test or a killed supervisor never leaves a control plane behind.
// (Pdeathsig follows the OS thread that forked the child; the Go runtime only ends threads whose
// goroutine exits while locked to it, which nothing here does.)
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
