package cli

import (
	"context"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/rewind-dev/rewind/api/v1alpha1"
)

// completionTimeout bounds how long a TAB waits for the hub.
const completionTimeout = 3 * time.Second

// lister lists the names of hub objects in namespace ns for shell completion; args are the
// positional arguments already typed.
type lister func(ctx context.Context, c client.Client, ns string, args []string) ([]string, error)

// completeArgs completes positional argument i with lists[i], and nothing after the last.
func (h *hubFlags) completeArgs(lists ...lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) >= len(lists) {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		return h.hubNames(cmd, args, toComplete, lists[len(args)])
	}
}

// completeFlag completes a flag's value with list.
func (h *hubFlags) completeFlag(list lister) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		return h.hubNames(cmd, args, toComplete, list)
	}
}

// hubNames asks the hub for names starting with toComplete. It offers nothing (and no file
// names) when the hub cannot be reached or read: a TAB never prints an error, and it waits
// at most completionTimeout.
func (h *hubFlags) hubNames(cmd *cobra.Command, args []string, toComplete string, list lister) ([]cobra.Completion, cobra.ShellCompDirective) {
	cfg, err := h.config()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cfg.Timeout = completionTimeout
	c, err := client.New(cfg, client.Options{Scheme: hubScheme})
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx := cmd.Context()
	if ctx == nil {
		ctx = context.Background()
	}
	ctx, cancel := context.WithTimeout(ctx, completionTimeout)
	defer cancel()
	names, err := list(ctx, c, h.ns(), args)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// withPrefix returns the distinct names that start with prefix, sorted.
func withPrefix(names []string, prefix string) []string {
	var out []string
	for _, n := range names {
		if strings.HasPrefix(n, prefix) {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

// namesOf lists the names of the objects of list (a typed List) selected by opts.
func namesOf(ctx context.Context, c client.Client, list client.ObjectList, opts ...client.ListOption) ([]string, error) {
	if err := c.List(ctx, list, opts...); err != nil {
		return nil, err
	}
	var names []string
	err := apimeta.EachListItem(list, func(o runtime.Object) error {
		names = append(names, o.(client.Object).GetName())
		return nil
	})
	return names, err
}

func listSnapshots(ctx context.Context, c client.Client, ns string, _ []string) ([]string, error) {
	return namesOf(ctx, c, &v1alpha1.SnapshotList{}, client.InNamespace(ns))
}

func listRollouts(ctx context.Context, c client.Client, ns string, _ []string) ([]string, error) {
	return namesOf(ctx, c, &v1alpha1.RolloutList{}, client.InNamespace(ns))
}

func listMemberClusters(ctx context.Context, c client.Client, _ string, _ []string) ([]string, error) {
	return namesOf(ctx, c, &v1alpha1.MemberClusterList{})
}

func listReleases(ctx context.Context, c client.Client, ns string, _ []string) ([]string, error) {
	return namesOf(ctx, c, &v1alpha1.OperatorReleaseList{}, client.InNamespace(ns))
}

func listNamespaces(ctx context.Context, c client.Client, _ string, _ []string) ([]string, error) {
	return namesOf(ctx, c, &corev1.NamespaceList{})
}

// listWaves lists the waves of the rollout named by the first argument.
func listWaves(ctx context.Context, c client.Client, ns string, args []string) ([]string, error) {
	ro := &v1alpha1.Rollout{}
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: args[0]}, ro); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(ro.Spec.Waves))
	for _, w := range ro.Spec.Waves {
		names = append(names, w.Name)
	}
	return names, nil
}

// listOperators lists the operators the namespace has releases of.
func listOperators(ctx context.Context, c client.Client, ns string, _ []string) ([]string, error) {
	var list v1alpha1.OperatorReleaseList
	if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, r := range list.Items {
		names = append(names, r.Spec.Operator)
	}
	return names, nil
}

// completeNamespaces completes -n with the hub's namespaces.
func (h *hubFlags) completeNamespaces(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	return h.hubNames(cmd, args, toComplete, listNamespaces)
}

// completeContexts completes --context with the contexts of the kubeconfig; it needs no hub.
func (h *hubFlags) completeContexts(_ *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	raw, err := h.loader().RawConfig()
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return withPrefix(sortedKeys(raw.Contexts), toComplete), cobra.ShellCompDirectiveNoFileComp
}
