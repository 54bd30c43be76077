//go:build !linux

package demo

import "syscall"

// childSysProcAttr puts the guardian in its own process group; outside Linux there is no
// parent-death signal, so Stop or Kill must be called.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
