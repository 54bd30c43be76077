package gather

import (
	"context"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/drain-guardian/drain-guardian/internal/mco"
)

// mcoPrefix marks the node annotations of the Machine Config Operator.
const mcoPrefix = "machineconfiguration.openshift.io/"

// NodeView is what gather keeps of a node: the MCO's annotations, the taints and the cordon, not
// the whole object (whose status lists every image on the node).
type NodeView struct {
	Name          string            `json:"name"`
	Unschedulable bool              `json:"unschedulable,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
	Taints        []corev1.Taint    `json:"taints,omitempty"`
	// Draining is true while the MCO drains the node (desiredDrain asks for a drain that
	// lastAppliedDrain does not confirm yet).
	Draining bool `json:"draining,omitempty"`
}

// ViewNode reduces node to its NodeView.
func ViewNode(node *corev1.Node) NodeView {
	v := NodeView{Name: node.Name, Unschedulable: node.Spec.Unschedulable, Taints: node.Spec.Taints,
		Draining: mco.ReadNode(node).Draining()}
	for k, val := range node.Annotations {
		if strings.HasPrefix(k, mcoPrefix) {
			if v.Annotations == nil {
				v.Annotations = map[string]string{}
			}
			v.Annotations[k] = val
		}
	}
	return v
}

// nodes writes every node's view, page by page.
func (g *gatherer) nodes(ctx context.Context) error {
	var views []NodeView
	opts := metav1.ListOptions{Limit: pageSize}
	for {
		list, err := g.src.Kube.CoreV1().Nodes().List(ctx, opts)
		if err != nil {
			g.problem("nodes: %v", err)
			break
		}
		for i := range list.Items {
			v := ViewNode(&list.Items[i])
			views = append(views, v)
			if v.Draining {
				g.result.Summary.Draining = append(g.result.Summary.Draining, v.Name)
			}
			if v.Unschedulable {
				g.result.Summary.Cordoned = append(g.result.Summary.Cordoned, v.Name)
			}
		}
		if opts.Continue = list.Continue; opts.Continue == "" {
			break
		}
	}
	g.result.Summary.Nodes = len(views)
	data, err := marshalYAML(map[string]any{"nodes": views})
	if err != nil {
		return err
	}
	return g.write("cluster/nodes.yaml", data)
}
