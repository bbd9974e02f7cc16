//go:build !unit

package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/artifact"
	"github.com/rewind-dev/rewind/internal/install"
	"github.com/rewind-dev/rewind/internal/release"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

const fixtures = "../release/testdata/"

var (
	hubOnce sync.Once
	hubC    client.Client
	hubErr  error
)

// hubClient returns a client for the shared hub with the rewind CRDs installed.
func hubClient(t *testing.T) client.Client {
	t.Helper()
	hubOnce.Do(func() {
		hubC, hubErr = client.New(env.Hub.RESTConfig(), client.Options{Scheme: hubScheme})
		if hubErr != nil {
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		hubErr = install.Hub(ctx, hubC)
	})
	if hubErr != nil {
		t.Fatal(hubErr)
	}
	return hubC
}

// hubArgs are the flags that point the CLI at the shared hub and a namespace.
func hubArgs(ns string) []string {
	return []string{"--kubeconfig", env.Hub.Kubeconfig, "-n", ns}
}

// releaseSources are the three source formats, each rendering the widget operator fixture.
var releaseSources = []struct {
	name    string
	args    []string
	version string
	image   string
	// golden is the digest the fixture must always give (the same as in internal/release).
	golden string
}{
	{
		name: "manifests", version: "1.0.0",
		args:   []string{"--manifests", fixtures + "manifests"},
		image:  "example.com/widget-operator@sha256:9a29f767217bb37ff4908f8cdde53c33bd89babc544a8722d7559128d47a7651",
		golden: "sha256:ecfd5e09ba13bca01011b864198ba4922ef8e40977227d18d0c8d77f0ad897cf",
	},
	{
		name: "chart", version: "2.0.0",
		args:   []string{"--chart", fixtures + "chart"},
		image:  "example.com/widget-operator@sha256:96de02ea89f210bd768e9511189362b1dd87b8e26bd35d6b92fbf9bdc95504c0",
		golden: "sha256:a0dc4e6b0806458bd2ba305ba9870574aa82f5abc60ddd971cac4aa67a743791",
	},
	{
		name: "bundle", version: "3.0.0",
		args:   []string{"--bundle", fixtures + "bundle"},
		image:  "example.com/widget-operator@sha256:882525a9c0fb9d06fade63fe984bb3c1111756299ed9c7c332641fa52a46198b",
		golden: "sha256:cc12775cd43145759957cb30758612830b0ed07fde0f914fb9601eae0b42d6e7",
	},
}

func createArgs(ns, name, version, image string, source []string) []string {
	args := append([]string{"release", "create", name, "--operator", "widget", "--version", version,
		"--git-commit", testCommit, "--image", image}, source...)
	return append(args, hubArgs(ns)...)
}

func TestReleaseCreateFromEachSource(t *testing.T) {
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	for _, src := range releaseSources {
		t.Run(src.name, func(t *testing.T) {
			ctx := t.Context()
			name := "widget-" + src.name
			out, err := run(ctx, createArgs(ns, name, src.version, src.image, src.args)...)
			if err != nil {
				t.Fatalf("release create: %v\n%s", err, out)
			}
			if !strings.Contains(out, "created") {
				t.Errorf("first create should say created:\n%s", out)
			}
			rel, objs, err := release.Load(ctx, c, ns, name)
			if err != nil {
				t.Fatal(err)
			}
			if rel.Spec.Digest != src.golden {
				t.Errorf("digest %s, want the golden %s", rel.Spec.Digest, src.golden)
			}
			// The stored bundle, read back, equals the rendered manifests.
			o := &releaseCreateOptions{operator: "widget", version: src.version, gitCommit: testCommit, image: src.image}
			switch src.name {
			case "manifests":
				o.manifests = src.args[1]
			case "chart":
				o.chart = src.args[1]
			case "bundle":
				o.bundle = src.args[1]
			}
			_, rendered, err := o.render(name, ns)
			if err != nil {
				t.Fatal(err)
			}
			stored, err := artifact.Get(ctx, c, ns, rel.Spec.Digest)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(stored, rendered) {
				t.Errorf("the stored manifests differ from the rendered ones")
			}
			back, err := release.Canonical(objs)
			if err != nil || !bytes.Equal(back, rendered) {
				t.Errorf("the parsed stored manifests do not re-serialize to the rendered ones (err=%v)", err)
			}
			if len(rel.Status.CRDs) != 1 || rel.Status.CRDs[0].Name != "widgets.example.com" || rel.Status.CRDs[0].StorageVersion == "" {
				t.Errorf("CRD inventory: %+v", rel.Status.CRDs)
			}
			switch src.name {
			case "chart":
				if rel.Spec.Chart == nil || rel.Spec.Chart.Version != "0.2.0" || rel.Spec.Chart.AppVersion != "2.0.0" {
					t.Errorf("chart info: %+v", rel.Spec.Chart)
				}
			case "bundle":
				if rel.Spec.Bundle == nil || rel.Spec.Bundle.OperatorVersion != "3.0.0" || rel.Spec.Bundle.Channel != "stable" {
					t.Errorf("bundle info: %+v", rel.Spec.Bundle)
				}
				if rel.Status.CRDs[0].ConversionStrategy != "Webhook" {
					t.Errorf("the bundle's CRD should convert by webhook: %+v", rel.Status.CRDs[0])
				}
			}

			// The same release again is a no-op.
			out, err = run(ctx, createArgs(ns, name, src.version, src.image, src.args)...)
			if err != nil || !strings.Contains(out, "unchanged") {
				t.Fatalf("creating the same release again must be a no-op: %v\n%s", err, out)
			}
			var chunks corev1.SecretList
			if err := c.List(ctx, &chunks, client.InNamespace(ns), client.MatchingLabels{artifact.LabelArtifact: strings.TrimPrefix(src.golden, "sha256:")[:63]}); err != nil {
				t.Fatal(err)
			}
			if len(chunks.Items) != 1 {
				t.Errorf("the manifests must be stored once, found %d chunk Secrets", len(chunks.Items))
			}
		})
	}

	// Another release under an existing name is an error.
	out, err := run(t.Context(), createArgs(ns, "widget-manifests", "1.0.1", releaseSources[0].image, releaseSources[0].args)...)
	if err == nil || !strings.Contains(err.Error(), "already exists with a different spec") {
		t.Fatalf("a different release under an existing name must fail, got %v\n%s", err, out)
	}
}

func TestReleaseCreateRejectsBadInput(t *testing.T) {
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	src := releaseSources[0]
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"mutable tag", createArgs(ns, "bad1", "1.0.0", "example.com/widget-operator:latest", src.args), "--image"},
		{"bad version", createArgs(ns, "bad2", "1.0", src.image, src.args), "--version"},
		{"image not in manifests", createArgs(ns, "bad3", "1.0.0", "example.com/other@sha256:"+strings.Repeat("a", 64), src.args), "--image"},
		{"no source", createArgs(ns, "bad4", "1.0.0", src.image, nil), "manifests"},
		{"appVersion differs from version", createArgs(ns, "bad5", "2.0.1", releaseSources[1].image, releaseSources[1].args), "appVersion"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out, err := run(t.Context(), tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("want an error naming %q, got %v\n%s", tc.want, err, out)
			}
		})
	}
}

func TestLargeReleaseIsChunked(t *testing.T) {
	c := hubClient(t)
	ns := testenv.Namespace(t, env.Hub.RESTConfig())
	dir := t.TempDir()
	for _, f := range []string{"00-crd.yaml", "10-rbac.yaml", "20-deployment.yaml"} {
		b, err := os.ReadFile(fixtures + "manifests/" + f)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// 3 MiB of incompressible data in ConfigMaps of 256 KiB each.
	var buf bytes.Buffer
	for i := 0; i < 12; i++ {
		raw := make([]byte, 192<<10)
		if _, err := rand.Read(raw); err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&buf, "---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: blob-%02d\ndata:\n  blob: %s\n", i, base64.StdEncoding.EncodeToString(raw))
	}
	if err := os.WriteFile(filepath.Join(dir, "30-blobs.yaml"), buf.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := run(t.Context(), createArgs(ns, "widget-big", "1.0.0", releaseSources[0].image, []string{"--manifests", dir})...)
	if err != nil {
		t.Fatalf("release create: %v\n%s", err, out)
	}
	rel := &v1alpha1.OperatorRelease{}
	if err := c.Get(t.Context(), client.ObjectKey{Namespace: ns, Name: "widget-big"}, rel); err != nil {
		t.Fatal(err)
	}
	if rel.Status.Bytes < 3<<20 {
		t.Fatalf("the release should be over 3 MiB, is %d bytes", rel.Status.Bytes)
	}
	var chunks corev1.SecretList
	if err := c.List(t.Context(), &chunks, client.InNamespace(ns), client.HasLabels{artifact.LabelArtifact}); err != nil {
		t.Fatal(err)
	}
	if len(chunks.Items) < 4 {
		t.Fatalf("a 3 MiB release must be stored in at least 4 chunks under 1 MiB, got %d", len(chunks.Items))
	}
	for _, s := range chunks.Items {
		if n := len(s.Data["chunk"]); n > 1<<20-64<<10 {
			t.Errorf("chunk %s holds %d bytes, too close to the 1 MiB object limit", s.Name, n)
		}
	}
	o := &releaseCreateOptions{operator: "widget", version: "1.0.0", gitCommit: testCommit, image: releaseSources[0].image, manifests: dir}
	_, rendered, err := o.render("widget-big", ns)
	if err != nil {
		t.Fatal(err)
	}
	stored, err := artifact.Get(t.Context(), c, ns, rel.Spec.Digest)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(stored, rendered) {
		t.Fatalf("the 3 MiB release did not read back byte-identical (%d vs %d bytes)", len(stored), len(rendered))
	}
}

func writeFile(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
}
