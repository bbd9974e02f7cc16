package cli

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"helm.sh/helm/v3/pkg/chartutil"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/release"
)

func newReleaseCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "release",
		Aliases: []string{"releases"},
		Short:   "Create immutable operator releases from manifests, a Helm chart or an OLM bundle",
		Example: `  rewind release create mysql-v1 --operator mysql-operator --version 1.0.0 \
      --git-commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90 \
      --image registry.example.com/mysql-operator:3f2a9c1 --manifests ./deploy`,
		Long: `An OperatorRelease is one immutable release of an operator: its SemVer version, pinned
image, git commit and the digest of its rendered manifests, stored in the hub namespace.
Its manifests come from a source the rewind controller fetches (an OCI registry, a Helm
repository, a Git repository) or are rendered and uploaded by this CLI.
List them with 'kubectl get operatorreleases -n NAMESPACE'.`,
	}
	cmd.AddCommand(newReleaseCreateCommand(h))
	return cmd
}

// releaseCreateOptions are the flags of `rewind release create`.
type releaseCreateOptions struct {
	operator, version, gitCommit, image string
	manifests, chart, values, bundle    string
	installNamespace, output            string
	apiVersions                         []string

	// A source the controller fetches (instead of an upload).
	from, repo, chartVersion, chartDigest string
	gitURL, commit, path, kind, secret    string
	valuesFrom                            []string
	insecure, noWait                      bool
	timeout                               time.Duration
}

// fromSource says the flags name a source for the controller rather than files to upload.
func (o *releaseCreateOptions) fromSource() bool {
	return o.from != "" || o.repo != "" || o.gitURL != ""
}

func newReleaseCreateCommand(h *hubFlags) *cobra.Command {
	o := &releaseCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME --operator O --version V --git-commit SHA --image REF (--from oci://REG/REPO@DIGEST | --repo URL --chart NAME --chart-version V --chart-digest DIGEST | --git URL --commit SHA --kind K | --manifests DIR | --chart DIR|TGZ | --bundle DIR)",
		Short: "Create an OperatorRelease from a source the controller fetches, or render and upload one",
		Long: `With a source (--from, --repo or --git) this creates an OperatorRelease whose spec.source the
rewind controller fetches, verifies against the pinned digest or commit, renders and stores in the
hub; it then waits until the release is Ready (--no-wait does not wait) and prints the condition
if it fails (a moved tag, a wrong digest, an unreachable or unauthorized source):
  --from oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST   a Helm chart pushed to an OCI registry
                                                         (helm push) or an OLM bundle image; a
                                                         TAG is checked to still point at DIGEST
  --repo URL --chart NAME --chart-version V --chart-digest sha256:DIGEST
                                                         a chart of a Helm repository, pinned by
                                                         the sha256 of its .tgz
  --git URL --commit SHA --kind helm|manifests|bundle [--path P]
                                                         a folder of a Git repository at a commit
--secret names a Secret of the namespace with the source's credentials (username and password,
token, .dockerconfigjson, ca.crt); --values, --values-from and --api-versions go to a chart.

Without a source (--manifests, --chart DIR|TGZ or --bundle: air-gapped use) the CLI renders the
operator's manifests itself (a plain folder, a Helm chart rendered with the Helm SDK, or an OLM
registry+v1 bundle turned into plain manifests), checks that the operator Deployment runs
--image, computes a digest over their canonical form, stores them in the hub (chunked,
content-addressed, never twice) and creates the immutable OperatorRelease.
Creating the same release again is a no-op; another release under an existing name is an error.`,
		Example: `  rewind release create mysql-v2 --operator mysql-operator --version 2.0.0 \
    --git-commit 9c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d \
    --image registry.example.com/mysql-operator@sha256:4f1c9e2a7b3d5e6f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f \
    --from oci://registry.example.com/charts/mysql-operator:2.0.0@sha256:0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c4b5a69788796a5b4c3d2e1f0 \
    --secret registry-credentials
  rewind release create mysql-v2 --operator mysql-operator --version 2.0.0 \
    --git-commit 9c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d \
    --image registry.example.com/mysql-operator@sha256:4f1c9e2a7b3d5e6f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f \
    --repo https://charts.example.com --chart mysql-operator --chart-version 2.0.0 \
    --chart-digest sha256:5e6f7a8b9c0d1e2f3a4b5c6d7e8f9a0b1c2d3e4f5a6b7c8d9e0f1a2b3c4d5e6f --values prod.yaml
  rewind release create mysql-v1 --operator mysql-operator --version 1.0.0 \
    --git-commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90 \
    --image registry.example.com/mysql-operator:3f2a9c1 \
    --git https://git.example.com/platform/mysql-operator.git \
    --commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90 --path deploy/v1 --kind manifests --no-wait
  rewind release create mysql-v1 --operator mysql-operator --version 1.0.0 \
    --git-commit 3f2a9c1e7b4d5a6f8e9d0c1b2a3f4e5d6c7b8a90 \
    --image registry.example.com/mysql-operator:3f2a9c1 --manifests ./deploy
  rewind release create mysql-v2 --operator mysql-operator --version 2.0.0 \
    --git-commit 9c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d \
    --image registry.example.com/mysql-operator@sha256:4f1c9e2a7b3d5e6f8a9b0c1d2e3f4a5b6c7d8e9f0a1b2c3d4e5f6a7b8c9d0e1f \
    --chart ./chart --values prod.yaml --api-versions monitoring.coreos.com/v1 -o yaml
  rewind release create mysql-v3 --operator mysql-operator --version 3.0.0 \
    --git-commit 0a1b2c3 --image registry.example.com/mysql-operator:0a1b2c3 --bundle ./bundle -n team-a`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if o.fromSource() {
				rel, err := o.sourceRelease(args[0], h.ns())
				if err != nil {
					return err
				}
				c, err := h.client()
				if err != nil {
					return err
				}
				return o.createFromSource(cmd, c, rel)
			}
			if err := o.checkUploadFlags(); err != nil {
				return err
			}
			rel, canonical, err := o.render(args[0], h.ns())
			if err != nil {
				return err
			}
			c, err := h.client()
			if err != nil {
				return err
			}
			if o.chart != "" {
				// Kept so that a Rollout can render the chart again with per-cluster values.
				in, err := o.renderInput()
				if err != nil {
					return err
				}
				if err := release.StoreRenderInput(cmd.Context(), c, rel, in); err != nil {
					return hubError(err)
				}
			}
			res, err := release.Create(cmd.Context(), c, rel, canonical)
			if err != nil {
				return hubError(err)
			}
			return o.print(cmd.OutOrStdout(), rel, string(res))
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.operator, "operator", "", "operator name (required)")
	f.StringVar(&o.version, "version", "", "SemVer release version (required)")
	f.StringVar(&o.gitCommit, "git-commit", "", "git commit the operator was built from, 7-40 hex (required)")
	f.StringVar(&o.image, "image", "", "operator image pinned by digest or by a tag equal to the git commit (required)")
	f.StringVar(&o.manifests, "manifests", "", "folder of plain YAML/JSON manifests")
	f.StringVar(&o.chart, "chart", "", "Helm chart folder or .tgz")
	f.StringVar(&o.values, "values", "", "values file for --chart, or for a chart from a source (sent as spec.values)")
	f.StringSliceVarP(&o.apiVersions, "api-versions", "a", nil, "for --chart or a chart from a source: APIs the member clusters serve besides Kubernetes' own (group/version or group/version/Kind, e.g. monitoring.coreos.com/v1), for charts that render objects only where the cluster has them (as helm --api-versions)")
	f.StringVar(&o.bundle, "bundle", "", "OLM registry+v1 bundle folder")
	f.StringVar(&o.installNamespace, "install-namespace", "", "namespace the chart or bundle is rendered for (default: OPERATOR-system)")
	f.StringVar(&o.from, "from", "", "source: oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST, a Helm chart or OLM bundle image in an OCI registry")
	f.BoolVar(&o.insecure, "insecure", false, "for --from: allow plain HTTP to the registry")
	f.StringVar(&o.repo, "repo", "", "source: URL of a Helm chart repository (with --chart NAME, --chart-version, --chart-digest)")
	f.StringVar(&o.chartVersion, "chart-version", "", "for --repo: the chart's exact version")
	f.StringVar(&o.chartDigest, "chart-digest", "", "for --repo: sha256:DIGEST of the chart's .tgz (its digest in index.yaml)")
	f.StringVar(&o.gitURL, "git", "", "source: https:// URL of a Git repository (with --commit and --kind)")
	f.StringVar(&o.commit, "commit", "", "for --git: the full 40-hex commit SHA")
	f.StringVar(&o.path, "path", "", "for --git: folder in the repository (default: its root)")
	f.StringVar(&o.kind, "kind", "", "for --git: what the folder holds: helm, manifests or bundle")
	f.StringVar(&o.secret, "secret", "", "for a source: Secret in the namespace with its credentials (username/password, token, .dockerconfigjson, ca.crt)")
	f.StringSliceVar(&o.valuesFrom, "values-from", nil, "for a chart from a source: ConfigMap[:KEY] with Helm values (key default values.yaml), merged in order before --values")
	f.BoolVar(&o.noWait, "no-wait", false, "for a source: create the release and return without waiting until the controller has stored it")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "for a source: how long to wait until the release is Ready")
	outputFlag(cmd, &o.output)
	cmd.MarkFlagsMutuallyExclusive("manifests", "bundle", "from", "repo", "git")
	cmd.MarkFlagsMutuallyExclusive("manifests", "chart", "bundle", "from", "git")
	requireOneOf(cmd, "manifests", "chart", "bundle", "from", "repo", "git")
	requireFlags(cmd, "operator", "version", "git-commit", "image")
	_ = cmd.MarkFlagDirname("manifests")
	_ = cmd.MarkFlagDirname("bundle")
	_ = cmd.MarkFlagFilename("chart", "tgz")
	_ = cmd.MarkFlagFilename("values", "yaml", "yml")
	return cmd
}

// readRelease reads an OperatorRelease of the hub and its stored manifests; a missing one is
// named with its namespace.
func readRelease(ctx context.Context, c client.Client, ns, name string) (*v1alpha1.OperatorRelease, []*unstructured.Unstructured, error) {
	rel := &v1alpha1.OperatorRelease{}
	if err := getHubObject(ctx, c, client.ObjectKey{Namespace: ns, Name: name}, rel, "release", "kubectl get operatorreleases -n "+ns); err != nil {
		return nil, nil, err
	}
	objs, err := release.Manifests(ctx, c, rel)
	return rel, objs, err
}

// renderInput is what --chart renders: the chart (its files, or the archive), the values file,
// the release name, namespace and API versions.
func (o *releaseCreateOptions) renderInput() (*release.RenderInput, error) {
	in := &release.RenderInput{ReleaseName: o.operator, Namespace: release.InstallNamespace(o.operator, o.installNamespace), APIVersions: o.apiVersions}
	if st, err := os.Stat(o.chart); err == nil && st.IsDir() {
		if in.Files, err = release.ChartFilesFS(os.DirFS(o.chart)); err != nil {
			return nil, fmt.Errorf("--chart %s: %w", o.chart, err)
		}
	} else if in.Archive, err = os.ReadFile(o.chart); err != nil {
		return nil, fmt.Errorf("--chart %s: %w", o.chart, err)
	}
	if o.values != "" {
		values, err := chartutil.ReadValuesFile(o.values)
		if err != nil {
			return nil, fmt.Errorf("--values %s: %w", o.values, err)
		}
		in.Values = values
	}
	return in, nil
}

// render validates the flags and renders the release; nothing is sent anywhere.
func (o *releaseCreateOptions) render(name, ns string) (*v1alpha1.OperatorRelease, []byte, error) {
	if err := o.validateCommon(name); err != nil {
		return nil, nil, err
	}
	if o.values != "" && o.chart == "" {
		return nil, nil, fmt.Errorf("--values only applies to --chart")
	}
	if len(o.apiVersions) > 0 && o.chart == "" {
		return nil, nil, fmt.Errorf("--api-versions only applies to --chart")
	}
	installNS := release.InstallNamespace(o.operator, o.installNamespace)
	spec := v1alpha1.OperatorReleaseSpec{Operator: o.operator, Version: o.version, GitCommit: o.gitCommit, Image: o.image}
	var objs []*unstructured.Unstructured
	var err error
	switch {
	case o.manifests != "":
		spec.Format = v1alpha1.FormatManifests
		objs, err = release.RenderManifests(o.manifests)
	case o.chart != "":
		spec.Format = v1alpha1.FormatChart
		objs, spec.Chart, err = release.RenderChart(o.chart, o.values, o.operator, installNS, o.apiVersions...)
		if err == nil && strings.TrimPrefix(spec.Chart.AppVersion, "v") != strings.TrimPrefix(o.version, "v") {
			err = fmt.Errorf("chart %s has appVersion %s but --version is %s: one release version binds the chart's appVersion to the operator version; fix Chart.yaml or --version",
				spec.Chart.Name, spec.Chart.AppVersion, o.version)
		}
	case o.bundle != "":
		spec.Format = v1alpha1.FormatBundle
		objs, spec.Bundle, err = release.RenderBundle(o.bundle, installNS)
		if err == nil && strings.TrimPrefix(spec.Bundle.OperatorVersion, "v") != strings.TrimPrefix(o.version, "v") {
			err = fmt.Errorf("bundle's olm.operatorVersion (CSV spec.version) is %s but --version is %s: one release version binds them; fix the CSV or --version",
				spec.Bundle.OperatorVersion, o.version)
		}
	}
	if err != nil {
		return nil, nil, err
	}
	if err := release.CheckImage(objs, o.image); err != nil {
		return nil, nil, err
	}
	canonical, err := release.Canonical(objs)
	if err != nil {
		return nil, nil, err
	}
	spec.Digest = release.Digest(canonical)
	rel := &v1alpha1.OperatorRelease{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "OperatorRelease"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"rewind.dev/operator": o.operator}},
		Spec:       spec,
	}
	return rel, canonical, nil
}

// print writes what create did: the release, its digest and CRDs (or the object with -o).
func (o *releaseCreateOptions) print(out io.Writer, rel *v1alpha1.OperatorRelease, result string) error {
	if ok, err := printStructured(out, o.output, rel); ok {
		return err
	}
	fmt.Fprintf(out, "operatorrelease/%s %s: %s %s, %d manifests, digest %s\n", rel.Name, result, rel.Spec.Operator, rel.Spec.Version, rel.Status.Objects, release.ManifestDigest(rel))
	if len(rel.Status.CRDs) > 0 {
		w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
		fmt.Fprintln(w, "CRD\tKIND\tSERVED\tSTORAGE\tCONVERSION")
		for _, c := range rel.Status.CRDs {
			fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Kind, strings.Join(c.ServedVersions, ","), c.StorageVersion, c.ConversionStrategy)
		}
		w.Flush()
	}
	return nil
}

// checkUploadFlags refuses the flags of a source when the release is uploaded.
func (o *releaseCreateOptions) checkUploadFlags() error {
	for flag, set := range map[string]bool{"--chart-version": o.chartVersion != "", "--chart-digest": o.chartDigest != "", "--commit": o.commit != "",
		"--path": o.path != "", "--kind": o.kind != "", "--secret": o.secret != "", "--values-from": len(o.valuesFrom) > 0, "--no-wait": o.noWait, "--insecure": o.insecure} {
		if set {
			return fmt.Errorf("%s applies to a release from a source (--from, --repo or --git), not to an upload of --manifests, --chart or --bundle", flag)
		}
	}
	return nil
}

// validateCommon checks the name and the flags every release takes.
func (o *releaseCreateOptions) validateCommon(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("release name %q is invalid: %s", name, strings.Join(errs, "; "))
	}
	for flag, v := range map[string]string{"--operator": o.operator, "--version": o.version, "--git-commit": o.gitCommit, "--image": o.image} {
		if v == "" {
			return fmt.Errorf("%s is required", flag)
		}
	}
	if errs := validation.IsDNS1123Label(o.operator); len(errs) > 0 {
		return fmt.Errorf("--operator %q is invalid: %s", o.operator, strings.Join(errs, "; "))
	}
	if err := release.ValidateVersion(o.version); err != nil {
		return err
	}
	if err := release.ValidateGitCommit(o.gitCommit); err != nil {
		return err
	}
	return release.ValidateImage(o.image, o.gitCommit)
}

var (
	sha256DigestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)
	fullCommitRE   = regexp.MustCompile(`^[0-9a-f]{40}$`)
)

// sourceRelease builds the OperatorRelease of a source from the flags; nothing is sent.
func (o *releaseCreateOptions) sourceRelease(name, ns string) (*v1alpha1.OperatorRelease, error) {
	if err := o.validateCommon(name); err != nil {
		return nil, err
	}
	src := &v1alpha1.ReleaseSource{}
	switch {
	case o.from != "":
		for flag, set := range map[string]bool{"--chart-version": o.chartVersion != "", "--chart-digest": o.chartDigest != "", "--commit": o.commit != "", "--path": o.path != "", "--kind": o.kind != ""} {
			if set {
				return nil, fmt.Errorf("%s does not apply to --from (an OCI artifact says what it is)", flag)
			}
		}
		oci, err := parseOCIRef(o.from)
		if err != nil {
			return nil, err
		}
		oci.Insecure = o.insecure
		src.OCI = oci
	case o.repo != "":
		if o.chart == "" || o.chartVersion == "" || o.chartDigest == "" {
			return nil, fmt.Errorf("--repo needs --chart NAME, --chart-version V and --chart-digest sha256:DIGEST (the sha256 of the chart's .tgz, its digest in index.yaml)")
		}
		if !strings.HasPrefix(o.repo, "https://") && !strings.HasPrefix(o.repo, "http://") {
			return nil, fmt.Errorf("--repo %q: give the https:// URL of the Helm repository (where index.yaml is); for a chart in an OCI registry use --from oci://...", o.repo)
		}
		if strings.Contains(o.chart, "/") {
			return nil, fmt.Errorf("--chart %q: with --repo, --chart is the chart's name in the repository index", o.chart)
		}
		if err := release.ValidateVersion(o.chartVersion); err != nil {
			return nil, fmt.Errorf("--chart-version: %w", err)
		}
		if !sha256DigestRE.MatchString(o.chartDigest) {
			return nil, fmt.Errorf("--chart-digest %q is not sha256:<64 lowercase hex> (the sha256 of the chart's .tgz)", o.chartDigest)
		}
		src.HelmRepository = &v1alpha1.HelmRepositorySource{URL: o.repo, Chart: o.chart, Version: o.chartVersion, Digest: o.chartDigest}
	default:
		if o.chartVersion != "" || o.chartDigest != "" {
			return nil, fmt.Errorf("--chart-version and --chart-digest apply to --repo")
		}
		if !strings.HasPrefix(o.gitURL, "https://") && !strings.HasPrefix(o.gitURL, "http://") {
			return nil, fmt.Errorf("--git %q: give an https:// URL of the repository (ssh:// and git@host:path are not supported)", o.gitURL)
		}
		if !fullCommitRE.MatchString(o.commit) {
			return nil, fmt.Errorf("--commit %q: give the full 40-hex commit SHA (a branch or tag would move)", o.commit)
		}
		kind := map[string]string{"helm": v1alpha1.FormatChart, "chart": v1alpha1.FormatChart, "manifests": v1alpha1.FormatManifests, "bundle": v1alpha1.FormatBundle}[strings.ToLower(o.kind)]
		if kind == "" {
			return nil, fmt.Errorf("--kind %q: say what --path holds: helm (a Helm chart), manifests (plain YAML) or bundle (an OLM registry+v1 bundle)", o.kind)
		}
		if strings.HasPrefix(o.path, "/") || slices.Contains(strings.Split(o.path, "/"), "..") {
			return nil, fmt.Errorf("--path %q: give a folder relative to the repository root, without ..", o.path)
		}
		src.Git = &v1alpha1.GitSource{URL: o.gitURL, Commit: o.commit, Path: strings.TrimPrefix(o.path, "./"), Kind: kind}
	}
	if o.insecure && src.OCI == nil {
		return nil, fmt.Errorf("--insecure applies to --from only")
	}
	if o.secret != "" {
		if errs := validation.IsDNS1123Subdomain(o.secret); len(errs) > 0 {
			return nil, fmt.Errorf("--secret %q is not a Secret name: %s", o.secret, strings.Join(errs, "; "))
		}
		src.SecretRef = &v1alpha1.LocalObjectReference{Name: o.secret}
	}
	spec := v1alpha1.OperatorReleaseSpec{Operator: o.operator, Version: o.version, GitCommit: o.gitCommit, Image: o.image,
		Source: src, InstallNamespace: o.installNamespace, APIVersions: o.apiVersions}
	for _, ref := range o.valuesFrom {
		cm, key, _ := strings.Cut(ref, ":")
		if errs := validation.IsDNS1123Subdomain(cm); len(errs) > 0 {
			return nil, fmt.Errorf("--values-from %q: give CONFIGMAP[:KEY]: %s", ref, strings.Join(errs, "; "))
		}
		spec.ValuesFrom = append(spec.ValuesFrom, v1alpha1.ValuesReference{ConfigMap: cm, Key: key})
	}
	if o.values != "" {
		data, err := os.ReadFile(o.values)
		if err != nil {
			return nil, fmt.Errorf("--values: %w", err)
		}
		raw, err := yaml.YAMLToJSON(data)
		if err != nil || !bytes.HasPrefix(bytes.TrimSpace(raw), []byte("{")) {
			return nil, fmt.Errorf("--values %s is not a YAML map of Helm values: %v", o.values, err)
		}
		spec.Values = &apiextensionsv1.JSON{Raw: raw}
	}
	return &v1alpha1.OperatorRelease{
		TypeMeta:   metav1.TypeMeta{APIVersion: v1alpha1.GroupVersion.String(), Kind: "OperatorRelease"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"rewind.dev/operator": o.operator}},
		Spec:       spec,
	}, nil
}

// parseOCIRef reads oci://REGISTRY/REPOSITORY[:TAG]@sha256:DIGEST.
func parseOCIRef(ref string) (*v1alpha1.OCISource, error) {
	usage := "give oci://REGISTRY/REPOSITORY@sha256:DIGEST (or oci://REGISTRY/REPOSITORY:TAG@sha256:DIGEST, which also checks that the tag still points at the digest)"
	rest, ok := strings.CutPrefix(ref, "oci://")
	if !ok {
		return nil, fmt.Errorf("--from %q: %s", ref, usage)
	}
	repo, digest, ok := strings.Cut(rest, "@")
	if !ok {
		return nil, fmt.Errorf("--from %q has no digest: a tag alone can move; %s", ref, usage)
	}
	if !sha256DigestRE.MatchString(digest) {
		return nil, fmt.Errorf("--from %q: digest %q is not sha256:<64 lowercase hex>; %s", ref, digest, usage)
	}
	tag := ""
	if colon := strings.LastIndex(repo, ":"); colon > strings.LastIndex(repo, "/") {
		repo, tag = repo[:colon], repo[colon+1:]
	}
	if !strings.Contains(repo, "/") {
		return nil, fmt.Errorf("--from %q: no repository after the registry host; %s", ref, usage)
	}
	return &v1alpha1.OCISource{Repository: repo, Digest: digest, Tag: tag}, nil
}

// createFromSource creates rel (or finds it there with the same spec), then waits until the
// controller has stored it, unless --no-wait.
func (o *releaseCreateOptions) createFromSource(cmd *cobra.Command, c client.Client, rel *v1alpha1.OperatorRelease) error {
	ctx := cmd.Context()
	result := "created"
	if err := c.Create(ctx, rel); err != nil {
		if !apierrors.IsAlreadyExists(err) {
			return hubError(fmt.Errorf("creating OperatorRelease %s/%s: %w", rel.Namespace, rel.Name, err))
		}
		existing := &v1alpha1.OperatorRelease{}
		if err := c.Get(ctx, client.ObjectKeyFromObject(rel), existing); err != nil {
			return err
		}
		if !equality.Semantic.DeepEqual(existing.Spec, rel.Spec) {
			return fmt.Errorf("OperatorRelease %s/%s already exists with a different spec: releases are immutable, create this one under a new name", rel.Namespace, rel.Name)
		}
		rel, result = existing, "unchanged"
	}
	if o.noWait {
		if ok, err := printStructured(cmd.OutOrStdout(), o.output, rel); ok {
			return err
		}
		fmt.Fprintf(cmd.OutOrStdout(), "operatorrelease/%s %s: %s %s from %s; the controller fetches it (kubectl get operatorrelease %s -n %s)\n",
			rel.Name, result, rel.Spec.Operator, rel.Spec.Version, sourceString(rel.Spec.Source), rel.Name, rel.Namespace)
		return nil
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "operatorrelease/%s %s; waiting until the controller has fetched, verified and stored %s...\n", rel.Name, result, sourceString(rel.Spec.Source))
	got, lastErr, err := waitSettled(ctx, c, client.ObjectKeyFromObject(rel), 500*time.Millisecond, o.timeout)
	ready := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionReady)
	switch {
	case err == nil && ready != nil && ready.Status == metav1.ConditionTrue:
		return o.print(cmd.OutOrStdout(), got, result)
	case err == nil && ready != nil:
		return fmt.Errorf("operatorrelease/%s is not ready: %s: %s", rel.Name, ready.Reason, ready.Message)
	case err == nil:
		return fmt.Errorf("operatorrelease/%s is stalled", rel.Name)
	case ready != nil:
		return fmt.Errorf("operatorrelease/%s is not ready after %s: %s: %s", rel.Name, o.timeout, ready.Reason, ready.Message)
	}
	if lastErr != nil {
		return hubError(fmt.Errorf("operatorrelease/%s is not ready after %s; the last read of it failed: %w", rel.Name, o.timeout, lastErr))
	}
	return fmt.Errorf("operatorrelease/%s is not ready after %s (%v): is the rewind controller running? (rewind controller, or its Deployment in the hub)", rel.Name, o.timeout, err)
}

// waitSettled reads the release at key every interval until it is Ready or Stalled, or timeout
// passes. A failed read is tried again at the next tick (the hub may be briefly unreachable);
// lastErr is the error of the last read when it failed (nil when it succeeded), err that of
// the wait (nil when the release settled).
func waitSettled(ctx context.Context, c client.Reader, key client.ObjectKey, interval, timeout time.Duration) (got *v1alpha1.OperatorRelease, lastErr, err error) {
	got = &v1alpha1.OperatorRelease{}
	err = wait.PollUntilContextTimeout(ctx, interval, timeout, true, func(ctx context.Context) (bool, error) {
		if lastErr = c.Get(ctx, key, got); lastErr != nil {
			return false, nil
		}
		return meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionReady) || meta.IsStatusConditionTrue(got.Status.Conditions, v1alpha1.ConditionStalled), nil
	})
	return got, lastErr, err
}

// sourceString names a source for messages.
func sourceString(src *v1alpha1.ReleaseSource) string {
	switch {
	case src == nil:
		return "an upload"
	case src.OCI != nil:
		s := "oci://" + src.OCI.Repository
		if src.OCI.Tag != "" {
			s += ":" + src.OCI.Tag
		}
		return s + "@" + src.OCI.Digest
	case src.HelmRepository != nil:
		return fmt.Sprintf("chart %s %s of %s", src.HelmRepository.Chart, src.HelmRepository.Version, src.HelmRepository.URL)
	case src.Git != nil:
		s := src.Git.URL + "@" + src.Git.Commit
		if src.Git.Path != "" {
			s += ":" + src.Git.Path
		}
		return s
	}
	return "an empty source"
}
