package testbed

import (
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DefaultNodes is the number of fake nodes in each cluster with workloads when
// Options.Nodes is 0.
const DefaultNodes = 3

// The well-known labels the testbed's fake nodes carry, as a cloud provider's nodes do.
const (
	LabelOS           = "kubernetes.io/os"
	LabelArch         = "kubernetes.io/arch"
	LabelHostname     = "kubernetes.io/hostname"
	LabelInstanceType = "node.kubernetes.io/instance-type"
	LabelZone         = "topology.kubernetes.io/zone"
	LabelRegion       = "topology.kubernetes.io/region"
	// LabelKwok marks the testbed's fake nodes (type=kwok).
	LabelKwok = "type"
)

// regions are given to clusters in turn (the hub first), so that a fleet looks spread over
// regions; each cluster's nodes are spread over three zones of its region.
var regions = []string{"us-east-1", "eu-west-1", "ap-southeast-1", "us-west-2", "eu-central-1", "ap-northeast-1"}

// zonesPerRegion is how many zones a cluster's nodes are spread over (a, b, c).
const zonesPerRegion = 3

// instanceType is the instance type of every fake node; capacity and allocatable below are
// what a node of that type reports (4 vCPU, 16 GiB).
const instanceType = "m5.xlarge"

// nodeName is the name of the i-th fake node of a cluster.
func nodeName(i int) string { return "kwok-node-" + strconv.Itoa(i) }

// fakeNode is the i-th fake node of a cluster in region, for kwok to run: the labels, capacity
// and node info of a real Linux node, and kwok's annotation.
func fakeNode(region string, i int, kubeletVersion string) *corev1.Node {
	name := nodeName(i)
	zone := region + string(rune('a'+i%zonesPerRegion))
	q := resource.MustParse
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        name,
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
			Labels: map[string]string{
				LabelKwok:                 "kwok",
				LabelHostname:             name,
				LabelOS:                   "linux",
				LabelArch:                 "amd64",
				"beta.kubernetes.io/os":   "linux",
				"beta.kubernetes.io/arch": "amd64",
				LabelInstanceType:         instanceType,
				LabelZone:                 zone,
				LabelRegion:               region,
			},
		},
		Spec: corev1.NodeSpec{ProviderID: "kwok://" + zone + "/" + name},
		Status: corev1.NodeStatus{
			Capacity: corev1.ResourceList{
				corev1.ResourceCPU:              q("4"),
				corev1.ResourceMemory:           q("16093644Ki"),
				corev1.ResourcePods:             q("110"),
				corev1.ResourceEphemeralStorage: q("104845292Ki"),
			},
			Allocatable: corev1.ResourceList{
				corev1.ResourceCPU:              q("3920m"),
				corev1.ResourceMemory:           q("15186380Ki"),
				corev1.ResourcePods:             q("110"),
				corev1.ResourceEphemeralStorage: q("95551679124"),
			},
			Addresses: []corev1.NodeAddress{
				{Type: corev1.NodeInternalIP, Address: "10.0." + strconv.Itoa(i%zonesPerRegion) + "." + strconv.Itoa(10+i/zonesPerRegion)},
				{Type: corev1.NodeHostName, Address: name},
			},
			NodeInfo: corev1.NodeSystemInfo{
				OperatingSystem:         "linux",
				Architecture:            "amd64",
				KubeletVersion:          kubeletVersion,
				ContainerRuntimeVersion: "containerd://2.1.4",
				KernelVersion:           "6.8.0-1031-aws",
				OSImage:                 "Ubuntu 24.04.3 LTS",
			},
		},
	}
}

// createNodes creates the cluster's fake nodes (kwok then makes them Ready).
func (c *Cluster) createNodes(ctx context.Context, cs kubernetes.Interface) ([]string, error) {
	v, err := cs.Discovery().ServerVersion()
	if err != nil {
		return nil, fmt.Errorf("testbed: version of %s: %w", c.Name, err)
	}
	names := make([]string, 0, c.tb.nodes())
	for i := 0; i < c.tb.nodes(); i++ {
		n := fakeNode(regions[c.index%len(regions)], i, v.GitVersion)
		if _, err := cs.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, fmt.Errorf("testbed: creating the fake node %s in %s: %w", n.Name, c.Name, err)
		}
		names = append(names, n.Name)
	}
	return names, nil
}

// nodes is the number of fake nodes per cluster with workloads.
func (t *Testbed) nodes() int {
	if t.opts.Nodes > 0 {
		return t.opts.Nodes
	}
	return DefaultNodes
}

// readyNode removes the not-ready taint from the node once kwok reports it Ready (only the
// node-lifecycle controller, not run here, would remove it). It says whether the node is
// Ready and untainted.
func readyNode(ctx context.Context, cs kubernetes.Interface, name string) bool {
	n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return false
	}
	ready := false
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady && cond.Status == corev1.ConditionTrue {
			ready = true
		}
	}
	if !ready {
		return false
	}
	var keep []corev1.Taint
	for _, taint := range n.Spec.Taints {
		if taint.Key != corev1.TaintNodeNotReady {
			keep = append(keep, taint)
		}
	}
	if len(keep) == len(n.Spec.Taints) {
		return true
	}
	n.Spec.Taints = keep
	_, err = cs.CoreV1().Nodes().Update(ctx, n, metav1.UpdateOptions{})
	return err == nil
}
