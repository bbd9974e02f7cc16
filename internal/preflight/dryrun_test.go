package preflight

import (
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	cases := []struct {
		name        string
		live, after string
		// want is every diff line.
		want []string
	}{
		{name: "unchanged",
			live:  "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, resourceVersion: '1'}\ndata: {a: '1'}\n",
			after: "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: c, resourceVersion: '2'}\ndata: {a: '1'}\n"},
		{name: "changed, added and removed fields, labels",
			live:  "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, labels: {app.kubernetes.io/version: '1'}}\nspec: {replicas: 1, paused: true, template: {spec: {containers: [{name: m, image: 'op:1'}]}}}\n",
			after: "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: d, labels: {app.kubernetes.io/version: '2'}}\nspec: {replicas: 1, minReadySeconds: 5, template: {spec: {containers: [{name: m, image: 'op:2'}]}}}\n",
			want: []string{
				"~ .metadata.labels['app.kubernetes.io/version']: 1 -> 2",
				"- .spec.paused",
				"~ .spec.template.spec.containers[0].image: op:1 -> op:2",
				"+ .spec.minReadySeconds: 5",
			}},
		{name: "a Secret's values are never shown",
			live:  "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: Opaque\ndata: {password: aHVudGVyMg==, user: YXBw}\n",
			after: "apiVersion: v1\nkind: Secret\nmetadata: {name: s}\ntype: kubernetes.io/basic-auth\ndata: {password: czNjcjN0, token: dDBrM24=, user: YXBw}\n",
			want: []string{
				"~ .data.password: (redacted) -> (redacted)",
				"~ .type: Opaque -> kubernetes.io/basic-auth",
				"+ .data.token: (redacted)",
			}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objs := objects(t, tc.live, tc.after)
			got := Diff(objs[0], objs[1])
			if strings.Join(got, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("diff:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tc.want, "\n"))
			}
			for _, secret := range []string{"aHVudGVyMg==", "czNjcjN0", "dDBrM24="} {
				if strings.Contains(strings.Join(got, "\n"), secret) {
					t.Errorf("the diff shows a Secret value: %v", got)
				}
			}
		})
	}
}
