package main

import (
	"fmt"
	"runtime/debug"
	"strings"
)

// versionText describes this build from what the Go toolchain stamped into it.
func versionText() string {
	info, ok := debug.ReadBuildInfo()
	return formatVersion(info, ok)
}

// formatVersion says which module version and VCS revision info describes. The toolchain
// stamps the revision only when it builds inside a VCS checkout (and -buildvcs is not off), so
// a build from a source archive or a Docker context without .git says "unknown" rather than
// guessing.
func formatVersion(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil {
		return "stocksvc: no build information (built without module support)\n"
	}
	version := info.Main.Version
	if version == "" {
		version = "(devel)"
	}
	settings := map[string]string{}
	for _, s := range info.Settings {
		settings[s.Key] = s.Value
	}
	revision := settings["vcs.revision"]
	switch {
	case revision == "":
		revision = "unknown (not built from a VCS checkout)"
	case settings["vcs.modified"] == "true":
		revision += " (with uncommitted changes)"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "stocksvc %s\n", version)
	fmt.Fprintf(&b, "module:    %s\n", info.Main.Path)
	fmt.Fprintf(&b, "revision:  %s\n", revision)
	if t := settings["vcs.time"]; t != "" {
		fmt.Fprintf(&b, "committed: %s\n", t)
	}
	fmt.Fprintf(&b, "go:        %s\n", info.GoVersion)
	return b.String()
}
