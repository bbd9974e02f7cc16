// Command image builds the rewind-controller container image from a built binary, without a
// container engine (see internal/image), and writes it as an OCI image layout and a tarball.
// `make image` runs it.
package main

import (
	"flag"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/rewind-dev/rewind/internal/image"
)

func main() {
	var o image.Options
	var layoutDir, tarPath, ref, epoch string
	flag.StringVar(&o.Binary, "binary", "", "the rewind-controller binary (linux, static, built with -trimpath)")
	flag.StringVar(&o.License, "license", "LICENSE", "the LICENSE file to ship in the image")
	flag.StringVar(&o.OS, "os", "linux", "the binary's GOOS")
	flag.StringVar(&o.Arch, "arch", "amd64", "the binary's GOARCH")
	flag.StringVar(&o.Version, "version", "", "version label")
	flag.StringVar(&o.Revision, "revision", "", "git commit label")
	flag.StringVar(&o.Source, "source", "https://github.com/rewind-dev/rewind", "source repository label")
	flag.StringVar(&ref, "ref", "ghcr.io/rewind-dev/rewind-controller:dev", "the image reference (tag) recorded in the layout and the tarball")
	flag.StringVar(&layoutDir, "layout", "", "write an OCI image layout to this folder")
	flag.StringVar(&tarPath, "tarball", "", "write a docker-save tarball to this file")
	flag.StringVar(&epoch, "source-date-epoch", os.Getenv("SOURCE_DATE_EPOCH"), "creation time of the image and its files, in seconds since the epoch (default $SOURCE_DATE_EPOCH, else 0)")
	flag.Parse()
	if err := run(o, layoutDir, tarPath, ref, epoch); err != nil {
		fmt.Fprintln(os.Stderr, "image:", err)
		os.Exit(1)
	}
}

func run(o image.Options, layoutDir, tarPath, ref, epoch string) error {
	if o.Binary == "" || (layoutDir == "" && tarPath == "") {
		return fmt.Errorf("--binary and at least one of --layout and --tarball are required")
	}
	if epoch != "" {
		s, err := strconv.ParseInt(epoch, 10, 64)
		if err != nil {
			return fmt.Errorf("--source-date-epoch %q: %w", epoch, err)
		}
		o.Created = time.Unix(s, 0)
	}
	img, err := image.Build(o)
	if err != nil {
		return err
	}
	if layoutDir != "" {
		if err := image.WriteLayout(layoutDir, img, ref); err != nil {
			return err
		}
	}
	if tarPath != "" {
		if err := image.WriteTarball(tarPath, img, ref); err != nil {
			return err
		}
	}
	d, err := img.Digest()
	if err != nil {
		return err
	}
	fmt.Printf("%s@%s\n", ref, d)
	return nil
}
