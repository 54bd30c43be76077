package controller

import (
	mcfglisters "github.com/openshift/client-go/machineconfiguration/listers/machineconfiguration/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	policylisters "k8s.io/client-go/listers/policy/v1"

	"github.com/drain-guardian/drain-guardian/internal/blocking"
	"github.com/drain-guardian/drain-guardian/internal/podinfo"
	"github.com/drain-guardian/drain-guardian/internal/workload"
)

// view is the cluster as the guardian reads it: the listers of the shared informers and the lookups
// and caches built on them (see Informers). Its methods are the reads the reconcilers share (the pods
// on a node and the PDBs blocking them, a workload's pods, a target's Surge, a node's pool, signals
// and predicted update order, survivors, capacity held): a view holds no client, executor or
// bookkeeping, so nothing that reads it can write through it or remember.
type view struct {
	nsSelector, poolSelector labels.Selector

	nodes corelisters.NodeLister
	// pods is indexed by node (nodeNameIndex).
	pods podinfo.Lister
	pdbs policylisters.PodDisruptionBudgetLister
	// selectors holds the PDBs' parsed selectors, one parse per change of a PDB.
	selectors  *blocking.SelectorCache
	namespaces corelisters.NamespaceLister
	// pools is nil when the cluster does not serve MachineConfigPools (plain Kubernetes).
	pools mcfglisters.MachineConfigPoolLister
	// plans caches each pool's predicted update order (see plan) until the next node or pool event.
	plans *planCache
	// answers reads whether an MCO update drains (see mcd.go).
	answers *mcdAnswers
	store   *workload.Store
	surges  *surgeLister
	kserve  *kserveAPIs
	// dra is nil when the cluster does not serve resource.k8s.io/v1 (see watchDevices).
	dra *draCaches
	// sources reads the drains that do not come from the MCO (see sources.go).
	sources *sources
}
