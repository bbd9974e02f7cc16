// Package version holds what the rewind binaries were built from. `make build` sets the
// variables with -ldflags -X; a plain `go build` leaves the defaults.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
)

// Set at link time: go build -ldflags "-X github.com/rewind-dev/rewind/internal/version.Version=v0.3.0 ...".
var (
	// Version is the release (a SemVer tag, or git describe output); "dev" when not set.
	Version = "dev"
	// Commit is the git commit the binary was built from.
	Commit = ""
	// BuildDate is when the binary was built (RFC 3339, UTC); make derives it from
	// SOURCE_DATE_EPOCH or the commit time so that builds are reproducible.
	BuildDate = ""
)

// Info describes a build.
type Info struct {
	// Version is the release.
	Version string `json:"version"`
	// Commit is the git commit.
	Commit string `json:"commit"`
	// BuildDate is when it was built (RFC 3339).
	BuildDate string `json:"buildDate"`
	// GoVersion is the Go toolchain that built it.
	GoVersion string `json:"goVersion"`
	// Platform is GOOS/GOARCH.
	Platform string `json:"platform"`
}

// Get returns the build's Info. A binary built without -ldflags reports the commit recorded
// by the Go toolchain (vcs.revision) when there is one.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, BuildDate: BuildDate, GoVersion: runtime.Version(),
		Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if i.Commit == "" || i.BuildDate == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				switch {
				case s.Key == "vcs.revision" && i.Commit == "":
					i.Commit = s.Value
				case s.Key == "vcs.time" && i.BuildDate == "":
					i.BuildDate = s.Value
				}
			}
		}
	}
	return i
}

// String is the one-line form, e.g. "rewind v0.3.0 (commit 0123abc, built 2026-11-30T10:00:00Z, go1.26.8 linux/amd64)".
func (i Info) String() string {
	commit, date := i.Commit, i.BuildDate
	if commit == "" {
		commit = "unknown"
	}
	if date == "" {
		date = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, built %s, %s %s)", i.Version, commit, date, i.GoVersion, i.Platform)
}
