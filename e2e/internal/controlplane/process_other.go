//go:build !linux

package controlplane

import "syscall"

// childSysProcAttr puts each child in its own process group. Outside Linux there is no parent-death
// signal: Stop must be called to end the children.
func childSysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
