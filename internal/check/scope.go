package check

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/mco"
)

// inScope keeps the nodes whose MachineConfigPool (if any) --pool-selector selects.
func (a *analysis) inScope(nodes []*corev1.Node) []*corev1.Node {
	if a.cfg.PoolSelector == nil || a.cl.Pools == nil {
		return nodes
	}
	var out []*corev1.Node
	for _, n := range nodes {
		if p := mco.PoolForNode(n, a.cl.Pools); p == nil || a.cfg.PoolSelector.Matches(labels.Set(p.Labels)) {
			out = append(out, n)
		}
	}
	return out
}
