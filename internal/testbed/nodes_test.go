//go:build !unit

package testbed_test

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/rewind-dev/rewind/internal/testbed"
	"github.com/rewind-dev/rewind/internal/testbed/testenv"
)

func TestNodesLookReal(t *testing.T) {
	ctx := t.Context()
	m := env.Members[2]
	cs := clientset(t, m)
	nodes, err := cs.CoreV1().Nodes().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(nodes.Items) != testbed.DefaultNodes {
		t.Fatalf("want %d nodes, got %d", testbed.DefaultNodes, len(nodes.Items))
	}
	zones, regions := map[string]bool{}, map[string]bool{}
	for _, n := range nodes.Items {
		for _, k := range []string{testbed.LabelOS, testbed.LabelArch, testbed.LabelHostname, testbed.LabelInstanceType, testbed.LabelZone, testbed.LabelRegion, "beta.kubernetes.io/os", "beta.kubernetes.io/arch"} {
			if n.Labels[k] == "" {
				t.Errorf("node %s has no label %s: %v", n.Name, k, n.Labels)
			}
		}
		if n.Labels[testbed.LabelOS] != "linux" || n.Labels[testbed.LabelArch] != "amd64" || n.Labels[testbed.LabelHostname] != n.Name || n.Labels["type"] != "kwok" {
			t.Errorf("node %s labels: %v", n.Name, n.Labels)
		}
		if n.Annotations["kwok.x-k8s.io/node"] != "fake" {
			t.Errorf("node %s lacks kwok's annotation: %v", n.Name, n.Annotations)
		}
		zones[n.Labels[testbed.LabelZone]] = true
		regions[n.Labels[testbed.LabelRegion]] = true
		if !strings.HasPrefix(n.Labels[testbed.LabelZone], n.Labels[testbed.LabelRegion]) {
			t.Errorf("node %s: zone %q is not in region %q", n.Name, n.Labels[testbed.LabelZone], n.Labels[testbed.LabelRegion])
		}
		if n.Status.Allocatable.Pods().Value() != 110 || n.Status.Allocatable.Cpu().Cmp(resource.MustParse("3920m")) != 0 || n.Status.Allocatable.StorageEphemeral().IsZero() {
			t.Errorf("node %s allocatable: %v", n.Name, n.Status.Allocatable)
		}
		if info := n.Status.NodeInfo; info.OperatingSystem != "linux" || info.Architecture != "amd64" || !strings.HasPrefix(info.KubeletVersion, "v1.") {
			t.Errorf("node %s info: %+v", n.Name, info)
		}
		for _, taint := range n.Spec.Taints {
			t.Errorf("node %s keeps the taint %v", n.Name, taint)
		}
	}
	if len(zones) != testbed.DefaultNodes || len(regions) != 1 {
		t.Errorf("want the nodes in %d zones of one region, got zones %v, regions %v", testbed.DefaultNodes, zones, regions)
	}
}

// TestChartLikeDeploymentIsScheduled runs a Deployment shaped like the ones real charts ship:
// a node selector on the OS, a topology spread over zones and required anti-affinity on the
// host. It only becomes Available when the nodes carry those labels and there are enough.
func TestChartLikeDeploymentIsScheduled(t *testing.T) {
	ctx := t.Context()
	m := env.Members[2]
	cs := clientset(t, m)
	ns := testenv.Namespace(t, m.RESTConfig())
	labels := map[string]string{"app": "spread"}
	sel := &metav1.LabelSelector{MatchLabels: labels}
	dep := &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: "spread", Namespace: ns},
		Spec: appsv1.DeploymentSpec{
			Replicas: ptr.To[int32](3),
			Selector: sel,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					NodeSelector: map[string]string{testbed.LabelOS: "linux"},
					TopologySpreadConstraints: []corev1.TopologySpreadConstraint{{
						MaxSkew: 1, TopologyKey: testbed.LabelZone, WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: sel,
					}},
					Affinity: &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
						RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{{LabelSelector: sel, TopologyKey: testbed.LabelHostname}},
					}},
					Containers: []corev1.Container{{
						Name: "web", Image: "example.com/web:1",
						Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
							corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi"),
						}},
					}},
				},
			},
		},
	}
	if _, err := cs.AppsV1().Deployments(ns).Create(ctx, dep, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *appsv1.Deployment
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		d, err := cs.AppsV1().Deployments(ns).Get(ctx, "spread", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		last = d
		for _, c := range d.Status.Conditions {
			if c.Type == appsv1.DeploymentAvailable && c.Status == corev1.ConditionTrue && d.Status.AvailableReplicas == 3 {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		pods, _ := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		var why []string
		for _, p := range pods.Items {
			for _, c := range p.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status != corev1.ConditionTrue {
					why = append(why, p.Name+": "+c.Message)
				}
			}
		}
		t.Fatalf("the Deployment did not become Available with 3 replicas: %v; last status: %+v; unscheduled: %v", err, last.Status, why)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]bool{}
	for _, p := range pods.Items {
		hosts[p.Spec.NodeName] = true
	}
	if len(hosts) != 3 {
		t.Errorf("the 3 pods must run on 3 nodes, got %v", hosts)
	}
}
