package demo

import "syscall"

// childSysProcAttr puts the guardian in its own process group and has the kernel kill it when the
// process that started it dies, so an interrupted run leaves nothing behind.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
