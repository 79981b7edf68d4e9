//go:build !linux

package main

import "syscall"

// setUserTimeout does nothing where TCP_USER_TIMEOUT is not known: the keepalives alone then
// drop a silent connection.
func setUserTimeout(string, string, syscall.RawConn) error { return nil }
