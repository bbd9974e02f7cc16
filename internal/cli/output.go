package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
	"sigs.k8s.io/yaml"
)

// outputFormats are the values of -o/--output, the first is the default.
var outputFormats = []string{"table", "json", "yaml"}

// outputValue is the -o/--output flag: only outputFormats are accepted, so a bad value fails
// while the flags are parsed, before anything is read from a cluster.
type outputValue struct{ p *string }

func (o *outputValue) String() string { return *o.p }

func (o *outputValue) Type() string { return "string" }

func (o *outputValue) Set(s string) error {
	if !slices.Contains(outputFormats, s) {
		return fmt.Errorf("must be one of %s", strings.Join(outputFormats, ", "))
	}
	*o.p = s
	return nil
}

// outputFlag adds -o/--output (table, json or yaml) to cmd, with shell completion of its values.
func outputFlag(cmd *cobra.Command, p *string) {
	*p = outputFormats[0]
	cmd.Flags().VarP(&outputValue{p}, "output", "o", "output format: "+strings.Join(outputFormats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// printStructured prints v as JSON or YAML; ok is false for the table format. Hub objects
// and lists are printed with their apiVersion and kind, as kubectl prints them.
func printStructured(out io.Writer, format string, v any) (ok bool, err error) {
	switch format {
	case "table", "":
		return false, nil
	case "json", "yaml":
	default:
		return true, fmt.Errorf("--output %q is not supported: use %s", format, strings.Join(outputFormats, ", "))
	}
	if obj, isObj := v.(runtime.Object); isObj {
		setKind(obj)
		if meta.IsListType(obj) {
			_ = meta.EachListItem(obj, func(item runtime.Object) error { setKind(item); return nil })
		}
	}
	if format == "json" {
		b, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			return true, err
		}
		_, err = fmt.Fprintln(out, string(b))
		return true, err
	}
	b, err := yaml.Marshal(v)
	if err != nil {
		return true, err
	}
	_, err = out.Write(b)
	return true, err
}

// setKind fills in an object's apiVersion and kind from the hub scheme when the client left
// them empty.
func setKind(obj runtime.Object) {
	if !obj.GetObjectKind().GroupVersionKind().Empty() {
		return
	}
	if gvk, err := apiutil.GVKForObject(obj, hubScheme); err == nil {
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
}
