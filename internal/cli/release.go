package cli

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
	"github.com/rewind-dev/rewind/internal/release"
)

func newReleaseCommand(h *hubFlags) *cobra.Command {
	cmd := &cobra.Command{
		Use:     "release",
		Aliases: []string{"releases"},
		Short:   "Create immutable operator releases from manifests, a Helm chart or an OLM bundle",
		Long: `An OperatorRelease is one immutable release of an operator: its SemVer version, pinned
image, git commit and the digest of its rendered manifests, stored in the hub namespace.
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
}

func newReleaseCreateCommand(h *hubFlags) *cobra.Command {
	o := &releaseCreateOptions{}
	cmd := &cobra.Command{
		Use:   "create NAME --operator O --version V --git-commit SHA --image REF (--manifests DIR | --chart DIR|TGZ [--values FILE] | --bundle DIR)",
		Short: "Render a release, store its manifests content-addressed in the hub and create the OperatorRelease",
		Long: `Renders the operator's manifests (a plain folder, a Helm chart rendered with the Helm SDK, or an
OLM registry+v1 bundle turned into plain manifests), checks that the operator Deployment runs
--image, computes a digest over their canonical form, stores them in the hub (chunked,
content-addressed, never twice) and creates the immutable OperatorRelease.
Creating the same release again is a no-op; another release under an existing name is an error.`,
		Example: `  rewind release create mysql-v1 --operator mysql-operator --version 1.0.0 \
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
			rel, canonical, err := o.render(args[0], h.ns())
			if err != nil {
				return err
			}
			c, err := h.client()
			if err != nil {
				return err
			}
			res, err := release.Create(cmd.Context(), c, rel, canonical)
			if err != nil {
				return hubError(err)
			}
			if ok, err := printStructured(cmd.OutOrStdout(), o.output, rel); ok {
				return err
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "operatorrelease/%s %s: %s %s, %d manifests, digest %s\n", rel.Name, res, rel.Spec.Operator, rel.Spec.Version, rel.Status.Objects, release.ManifestDigest(rel))
			if len(rel.Status.CRDs) > 0 {
				w := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
				fmt.Fprintln(w, "CRD\tKIND\tSERVED\tSTORAGE\tCONVERSION")
				for _, c := range rel.Status.CRDs {
					fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\n", c.Name, c.Kind, strings.Join(c.ServedVersions, ","), c.StorageVersion, c.ConversionStrategy)
				}
				w.Flush()
			}
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.operator, "operator", "", "operator name (required)")
	f.StringVar(&o.version, "version", "", "SemVer release version (required)")
	f.StringVar(&o.gitCommit, "git-commit", "", "git commit the operator was built from, 7-40 hex (required)")
	f.StringVar(&o.image, "image", "", "operator image pinned by digest or by a tag equal to the git commit (required)")
	f.StringVar(&o.manifests, "manifests", "", "folder of plain YAML/JSON manifests")
	f.StringVar(&o.chart, "chart", "", "Helm chart folder or .tgz")
	f.StringVar(&o.values, "values", "", "values file for --chart")
	f.StringSliceVarP(&o.apiVersions, "api-versions", "a", nil, "for --chart: APIs the member clusters serve besides Kubernetes' own (group/version or group/version/Kind, e.g. monitoring.coreos.com/v1), for charts that render objects only where the cluster has them (as helm --api-versions)")
	f.StringVar(&o.bundle, "bundle", "", "OLM registry+v1 bundle folder")
	f.StringVar(&o.installNamespace, "install-namespace", "", "namespace the chart or bundle is rendered for (default: OPERATOR-system)")
	outputFlag(cmd, &o.output)
	cmd.MarkFlagsMutuallyExclusive("manifests", "chart", "bundle")
	requireOneOf(cmd, "manifests", "chart", "bundle")
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

// render validates the flags and renders the release; nothing is sent anywhere.
func (o *releaseCreateOptions) render(name, ns string) (*v1alpha1.OperatorRelease, []byte, error) {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return nil, nil, fmt.Errorf("release name %q is invalid: %s", name, strings.Join(errs, "; "))
	}
	for flag, v := range map[string]string{"--operator": o.operator, "--version": o.version, "--git-commit": o.gitCommit, "--image": o.image} {
		if v == "" {
			return nil, nil, fmt.Errorf("%s is required", flag)
		}
	}
	if errs := validation.IsDNS1123Label(o.operator); len(errs) > 0 {
		return nil, nil, fmt.Errorf("--operator %q is invalid: %s", o.operator, strings.Join(errs, "; "))
	}
	if err := release.ValidateVersion(o.version); err != nil {
		return nil, nil, err
	}
	if err := release.ValidateGitCommit(o.gitCommit); err != nil {
		return nil, nil, err
	}
	if err := release.ValidateImage(o.image, o.gitCommit); err != nil {
		return nil, nil, err
	}
	if o.values != "" && o.chart == "" {
		return nil, nil, fmt.Errorf("--values only applies to --chart")
	}
	if len(o.apiVersions) > 0 && o.chart == "" {
		return nil, nil, fmt.Errorf("--api-versions only applies to --chart")
	}
	installNS := o.installNamespace
	if installNS == "" {
		installNS = o.operator + "-system"
	}
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
