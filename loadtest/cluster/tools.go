package cluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// K6Version is the k6 release the script is written for.
const K6Version = "v1.8.1"

// FindK6 returns a k6 binary of K6Version: the given path, one on PATH or in GOPATH/bin, or
// one it installs with `go install` (into GOPATH/bin, so later runs find it at once).
func FindK6(ctx context.Context, given string, progress io.Writer) (string, error) {
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
		if err == nil && strings.Contains(string(out), K6Version) {
			return c, nil
		}
	}
	fmt.Fprintf(progress, "installing k6 %s with go install (about a minute, once)...\n", K6Version)
	cmd := exec.CommandContext(ctx, "go", "install", "go.k6.io/k6@"+K6Version)
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOBIN="+gobin)
	cmd.Stdout, cmd.Stderr = progress, progress
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("install k6 %s: %w", K6Version, err)
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

// FindTool returns the path of a command that comes from a Debian package, installing the
// package with apt-get when it is missing and the harness runs as root.
func FindTool(ctx context.Context, command, pkg string, progress io.Writer) (string, error) {
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

// serviceModule is the module path of the service the harness builds and drives.
const serviceModule = "github.com/stocksvc/stocksvc"

// RepositoryRoot finds the service's repository: the nearest directory at or above the
// working directory whose go.mod declares serviceModule. The harness is a module nested in
// it, so it is found from loadtest/ (go run -C loadtest .) as from the root.
func RepositoryRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", fmt.Errorf("working directory: %w", err)
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && declaresModule(b, serviceModule) {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("no go.mod of %s at or above the working directory; run the harness inside the repository", serviceModule)
		}
		dir = parent
	}
}

// declaresModule reports whether the go.mod text gomod declares module path.
func declaresModule(gomod []byte, path string) bool {
	for line := range strings.SplitSeq(string(gomod), "\n") {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "module "); ok {
			return strings.Trim(strings.TrimSpace(name), `"`) == path
		}
	}
	return false
}

// BuildService builds the service's cmd/stocksvc into binary, in the service's own module
// (its go.mod, not the harness's, decides the versions), writing the compiler's output to w.
func BuildService(ctx context.Context, binary string, w io.Writer) error {
	root, err := RepositoryRoot()
	if err != nil {
		return err
	}
	build := exec.CommandContext(ctx, "go", "build", "-o", binary, "./cmd/stocksvc")
	build.Dir = root
	build.Stdout, build.Stderr = w, w
	if err := build.Run(); err != nil {
		return fmt.Errorf("build stocksvc: %w", err)
	}
	return nil
}
