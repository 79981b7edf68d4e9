package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// k6Version is the k6 release the script is written for.
const k6Version = "v1.8.1"

// findK6 returns a k6 binary of k6Version: the given path, one on PATH or in GOPATH/bin, or
// one it installs with `go install` (into GOPATH/bin, so later runs find it at once).
func findK6(ctx context.Context, given string, progress io.Writer) (string, error) {
	if given != "" {
		return given, nil
	}
	candidates := []string{}
	if p, err := exec.LookPath("k6"); err == nil {
		candidates = append(candidates, p)
	}
	gobin := goBinDir(ctx)
	candidates = append(candidates, filepath.Join(gobin, "k6"))
	for _, c := range candidates {
		out, err := exec.CommandContext(ctx, c, "version").Output()
		if err == nil && strings.Contains(string(out), k6Version) {
			return c, nil
		}
	}
	fmt.Fprintf(progress, "installing k6 %s with go install (about a minute, once)...\n", k6Version)
	cmd := exec.CommandContext(ctx, "go", "install", "go.k6.io/k6@"+k6Version)
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOBIN="+gobin)
	cmd.Stdout, cmd.Stderr = progress, progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("install k6 %s: %w", k6Version, err)
	}
	return filepath.Join(gobin, "k6"), nil
}

func goBinDir(ctx context.Context) string {
	if out, err := exec.CommandContext(ctx, "go", "env", "GOBIN").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		return strings.TrimSpace(string(out))
	}
	if out, err := exec.CommandContext(ctx, "go", "env", "GOPATH").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		return filepath.Join(strings.SplitN(strings.TrimSpace(string(out)), string(os.PathListSeparator), 2)[0], "bin")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, "go", "bin")
}

// findTool returns the path of a command that comes from a Debian package, installing the
// package with apt-get when it is missing and the harness runs as root.
func findTool(ctx context.Context, command, pkg string, progress io.Writer) (string, error) {
	for _, p := range []string{command, "/usr/sbin/" + command, "/usr/bin/" + command} {
		if path, err := exec.LookPath(p); err == nil {
			return path, nil
		}
	}
	if os.Geteuid() != 0 {
		return "", fmt.Errorf("%s not found; install the %s package", command, pkg)
	}
	fmt.Fprintf(progress, "installing %s with apt-get...\n", pkg)
	install := func() error {
		cmd := exec.CommandContext(ctx, "apt-get", "install", "-y", "-qq", pkg)
		cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
		cmd.Stdout, cmd.Stderr = progress, progress
		return cmd.Run()
	}
	if err := install(); err != nil {
		update := exec.CommandContext(ctx, "apt-get", "update", "-qq")
		update.Stdout, update.Stderr = progress, progress
		if uerr := update.Run(); uerr != nil {
			return "", fmt.Errorf("apt-get update: %w", uerr)
		}
		if err := install(); err != nil {
			return "", fmt.Errorf("apt-get install %s: %w", pkg, err)
		}
	}
	return exec.LookPath("/usr/sbin/" + command)
}
