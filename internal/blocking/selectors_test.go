package blocking

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/drain-guardian/drain-guardian/internal/podinfo"
)

// The Matcher selects exactly the pods labels.Selector selects, for every operator.
func TestMatcherAgreesWithLabelSelector(t *testing.T) {
	expr := func(key string, op metav1.LabelSelectorOperator, values ...string) *metav1.LabelSelector {
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}}
	}
	selectors := map[string]*metav1.LabelSelector{
		"empty":          {},
		"matchLabels":    {MatchLabels: map[string]string{"app": "llm", "tier": "gpu"}},
		"In":             expr("app", metav1.LabelSelectorOpIn, "llm", "granite"),
		"NotIn":          expr("app", metav1.LabelSelectorOpNotIn, "llm", "granite"),
		"Exists":         expr("app", metav1.LabelSelectorOpExists),
		"DoesNotExist":   expr("app", metav1.LabelSelectorOpDoesNotExist),
		"labels and In":  {MatchLabels: map[string]string{"tier": "gpu"}, MatchExpressions: expr("app", metav1.LabelSelectorOpIn, "llm").MatchExpressions},
		"In, empty list": {MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn}}},
	}
	podLabels := []map[string]string{nil, {"app": "llm"}, {"app": "granite", "tier": "gpu"}, {"app": "llm", "tier": "gpu"}, {"app": "other"}, {"tier": "gpu"}}
	for name, sel := range selectors {
		pdb := &policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}}
		want, err := metav1.LabelSelectorAsSelector(sel)
		m := Compile(pdb)
		if err != nil {
			if m != nil {
				t.Errorf("%s: invalid selector (%v) compiled to a matcher", name, err)
			}
			continue
		}
		for _, l := range podLabels {
			if got := m.Matches(l); got != want.Matches(labels.Set(l)) {
				t.Errorf("%s: Matches(%v) = %v, labels.Selector says %v", name, l, got, !got)
			}
		}
	}
	if Compile(&policyv1.PodDisruptionBudget{}) != nil {
		t.Error("a nil selector must select nothing")
	}
	if Compile(&policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{Selector: expr("app", "Bogus", "x")}}) != nil {
		t.Error("an invalid selector must select nothing")
	}
}

// The cache parses a PDB once per resourceVersion, and again when it changes.
func TestSelectorCacheParsesOncePerVersion(t *testing.T) {
	c := NewSelectorCache()
	pdb := &policyv1.PodDisruptionBudget{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "models", UID: "u", ResourceVersion: "1"},
		Spec: policyv1.PodDisruptionBudgetSpec{Selector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "llm"}}}}
	pod := podinfo.From(podWithLabels("models", map[string]string{"app": "llm"}))
	first := c.Matcher(pdb)
	if c.Matcher(pdb) != first || !c.Selects(pdb, pod) {
		t.Fatal("the same version of the PDB was parsed again, or does not select its pod")
	}
	changed := pdb.DeepCopy()
	changed.ResourceVersion, changed.Spec.Selector.MatchLabels["app"] = "2", "granite"
	if c.Matcher(changed) == first || c.Selects(changed, pod) {
		t.Fatal("a new version of the PDB kept the old selector")
	}
	c.Forget("u")
	if c.Len() != 0 {
		t.Fatalf("%d entries after Forget", c.Len())
	}
}

// BenchmarkPDBSelectorMatch is the per-pod cost of a selector of many values: labels.Selector
// compares with each value; the Matcher looks the label up once.
func BenchmarkPDBSelectorMatch(b *testing.B) {
	values := make([]string, 5000)
	for i := range values {
		values[i] = fmt.Sprintf("tenant-app-%05d", i)
	}
	sel := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: values}}}
	pod := map[string]string{"app": "tenant-app-99999"}
	b.Run("labels.Selector", func(b *testing.B) {
		s, _ := metav1.LabelSelectorAsSelector(sel)
		for b.Loop() {
			s.Matches(labels.Set(pod))
		}
	})
	b.Run("Matcher", func(b *testing.B) {
		m := Compile(&policyv1.PodDisruptionBudget{Spec: policyv1.PodDisruptionBudgetSpec{Selector: sel}})
		for b.Loop() {
			m.Matches(pod)
		}
	})
}

func podWithLabels(namespace string, l map[string]string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: namespace, Labels: l}}
}
