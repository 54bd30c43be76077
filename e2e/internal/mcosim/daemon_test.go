package mcosim

import (
	"reflect"
	"strings"
	"testing"
	"time"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	opv1 "github.com/openshift/api/operator/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func drainAnnotations(desired, lastApplied string) nodeOpt {
	return func(n *corev1.Node) {
		if desired != "" {
			n.Annotations[DesiredDrainAnnotation] = desired
		}
		if lastApplied != "" {
			n.Annotations[LastAppliedDrainAnnotation] = lastApplied
		}
	}
}

func TestDecideDaemon(t *testing.T) {
	const old, next = "rendered-old", "rendered-new"
	drainNext, uncordonNext, uncordonOld := DrainRequest(next), UncordonRequest(next), UncordonRequest(old)
	rebootPlan := drainAndReboot(next, "test")
	noDrain := updatePlan{config: next, actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}}}
	drainNoReboot := updatePlan{config: next, drain: true, actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.DrainStatusAction}}}
	tests := []struct {
		name         string
		node         *corev1.Node
		plan         *updatePlan // nil: the reboot plan
		noPlan       bool
		reboot       rebootProgress
		drainExpired bool
		wantPhase    daemonPhase
		wantPatch    map[string]string
	}{
		{
			name:      "up to date",
			node:      testNode("a", done(old), drainAnnotations(uncordonOld, uncordonOld)),
			wantPhase: daemonIdle,
		},
		{
			name:      "unmanaged node",
			node:      testNode("a"),
			wantPhase: daemonIdle,
		},
		{
			name:      "unreconcilable node is left alone",
			node:      testNode("a", at(old, next, StateUnreconcilable)),
			wantPhase: daemonIdle,
		},
		{
			name:      "targeted: start working",
			node:      testNode("a", at(old, next, StateDone)),
			wantPhase: daemonPatch,
			wantPatch: map[string]string{StateAnnotation: StateWorking, ReasonAnnotation: ""},
		},
		{
			name:      "working, not decided yet: decide",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			noPlan:    true,
			wantPhase: daemonPlan,
		},
		{
			name:      "working, a plan for another config: decide again",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			plan:      &updatePlan{config: "rendered-other", drain: true, reboot: true},
			wantPhase: daemonPlan,
		},
		{
			name:      "no drain: update in place, no drain request",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			plan:      &noDrain,
			wantPhase: daemonStartApply,
		},
		{
			name:      "no drain: updating",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			plan:      &noDrain,
			reboot:    rebootInProgress,
			wantPhase: daemonApplying,
		},
		{
			name:      "no drain: updated, request the uncordon",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			plan:      &noDrain,
			reboot:    rebootFinished,
			wantPhase: daemonPatch,
			wantPatch: map[string]string{DesiredDrainAnnotation: uncordonNext},
		},
		{
			name:      "Drain action: drain first",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			plan:      &drainNoReboot,
			wantPhase: daemonPatch,
			wantPatch: map[string]string{DesiredDrainAnnotation: drainNext},
		},
		{
			name:      "Drain action: drained, update in place without a reboot",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(drainNext, drainNext)),
			plan:      &drainNoReboot,
			wantPhase: daemonStartApply,
		},
		{
			name:      "working: request the drain",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonOld, uncordonOld)),
			wantPhase: daemonPatch,
			wantPatch: map[string]string{DesiredDrainAnnotation: drainNext},
		},
		{
			name:      "drain requested, not done: wait",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(drainNext, uncordonOld)),
			wantPhase: daemonWaitDrain,
		},
		{
			name:         "drain not done in time: Degraded with the MCO's reason",
			node:         testNode("a", at(old, next, StateWorking), drainAnnotations(drainNext, uncordonOld)),
			drainExpired: true,
			wantPhase:    daemonPatch,
			wantPatch:    map[string]string{StateAnnotation: StateDegraded, ReasonAnnotation: drainTimeoutReason("a")},
		},
		{
			name:         "already Degraded: keep waiting",
			node:         testNode("a", at(old, next, StateDegraded), drainAnnotations(drainNext, uncordonOld)),
			drainExpired: true,
			wantPhase:    daemonWaitDrain,
		},
		{
			name:      "drain completes after Degraded: back to Working",
			node:      testNode("a", at(old, next, StateDegraded), drainAnnotations(drainNext, drainNext)),
			wantPhase: daemonPatch,
			wantPatch: map[string]string{StateAnnotation: StateWorking, ReasonAnnotation: ""},
		},
		{
			name:      "drained: reboot",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(drainNext, drainNext)),
			wantPhase: daemonStartReboot,
		},
		{
			name:      "rebooting",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(drainNext, drainNext)),
			reboot:    rebootInProgress,
			wantPhase: daemonRebooting,
		},
		{
			name:      "rebooted: request the uncordon, currentConfig unchanged",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(drainNext, drainNext)),
			reboot:    rebootFinished,
			wantPhase: daemonPatch,
			wantPatch: map[string]string{DesiredDrainAnnotation: uncordonNext},
		},
		{
			name:      "uncordon requested: wait, even without memory of the reboot",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonNext, drainNext)),
			wantPhase: daemonWaitUncordon,
		},
		{
			name:      "uncordoned: done",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(uncordonNext, uncordonNext)),
			wantPhase: daemonPatch,
			wantPatch: map[string]string{CurrentConfigAnnotation: next, StateAnnotation: StateDone, ReasonAnnotation: ""},
		},
		{
			name:      "retargeted back to the current config while cordoned: uncordon and finish",
			node:      testNode("a", at(old, old, StateWorking), drainAnnotations(DrainRequest("rendered-other"), DrainRequest("rendered-other"))),
			wantPhase: daemonPatch,
			wantPatch: map[string]string{DesiredDrainAnnotation: uncordonOld},
		},
		{
			name:      "retargeted while waiting for a drain: request the drain for the new target",
			node:      testNode("a", at(old, next, StateWorking), drainAnnotations(DrainRequest("rendered-other"), uncordonOld)),
			wantPhase: daemonPatch,
			wantPatch: map[string]string{DesiredDrainAnnotation: drainNext},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			plan := tt.plan
			if plan == nil && !tt.noPlan {
				plan = &rebootPlan
			}
			got := decideDaemon(tt.node, daemonInputs{plan: plan, progress: tt.reboot, drainWaitExpired: tt.drainExpired})
			if got.phase != tt.wantPhase {
				t.Fatalf("phase = %v, want %v (%s)", got.phase, tt.wantPhase, got.message)
			}
			if !reflect.DeepEqual(got.patch, tt.wantPatch) {
				t.Errorf("patch = %v, want %v", got.patch, tt.wantPatch)
			}
		})
	}
}

// walkDaemon walks one node through a whole update to next by applying each
// decision, standing in for the drain controller and for the daemon's own
// planning with plan, and returns the protocol's observable steps and the
// MachineConfigNode conditions written, in order.
func walkDaemon(t *testing.T, plan updatePlan) (steps []string, mcn []mcnUpdate) {
	t.Helper()
	const old, next = "rendered-old", "rendered-new"
	node := testNode("a", done(old))
	node.Annotations[DesiredConfigAnnotation] = next
	var in daemonInputs
	for i := 0; i < 20; i++ {
		d := decideDaemon(node, in)
		mcn = append(mcn, d.mcn...)
		switch d.phase {
		case daemonIdle:
			if !NodeUpdatedTo(node, next) {
				t.Fatalf("node not updated at the end: %v", node.Annotations)
			}
			return steps, mcn
		case daemonPatch:
			for k, v := range d.patch {
				node.Annotations[k] = v
			}
			switch {
			case d.patch[CurrentConfigAnnotation] != "":
				steps = append(steps, "currentConfig="+d.patch[CurrentConfigAnnotation]+",state="+d.patch[StateAnnotation])
			case d.patch[DesiredDrainAnnotation] != "":
				steps = append(steps, "desiredDrain="+d.patch[DesiredDrainAnnotation])
			default:
				steps = append(steps, "state="+d.patch[StateAnnotation])
			}
		case daemonPlan:
			in.plan = &plan
			steps = append(steps, "plan")
			mcn = append(mcn, mcnPrepared(plan.drain))
			if !plan.drain {
				mcn = append(mcn, mcnDrainNotRequired())
			}
		case daemonWaitDrain:
			node.Annotations[LastAppliedDrainAnnotation] = node.Annotations[DesiredDrainAnnotation]
			steps = append(steps, "drained")
		case daemonWaitUncordon:
			node.Annotations[LastAppliedDrainAnnotation] = node.Annotations[DesiredDrainAnnotation]
			steps = append(steps, "uncordoned")
		case daemonStartReboot:
			in.progress = rebootInProgress
			steps = append(steps, "reboot")
		case daemonRebooting:
			in.progress = rebootFinished
			steps = append(steps, "rebooted")
		case daemonStartApply:
			in.progress = rebootInProgress
			steps = append(steps, "apply")
		case daemonApplying:
			in.progress = rebootFinished
			steps = append(steps, "applied")
		}
	}
	t.Fatalf("no Done after 20 steps: %v", steps)
	return nil, nil
}

// TestDaemonSequence: an update that reboots drains first.
func TestDaemonSequence(t *testing.T) {
	const next = "rendered-new"
	steps, _ := walkDaemon(t, drainAndReboot(next, "test"))
	want := []string{
		"state=Working", "plan", "desiredDrain=" + DrainRequest(next), "drained", "reboot", "rebooted",
		"desiredDrain=" + UncordonRequest(next), "uncordoned", "currentConfig=" + next + ",state=Done",
	}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("steps =\n%v\nwant\n%v", steps, want)
	}
}

// TestDaemonSequenceWithoutDrain: an update whose actions are all None
// (an SSH key) never asks for a drain and never reboots, but still asks for
// uncordon-<desired> and waits for it before Done, as the MCD does; the
// MachineConfigNode says so.
func TestDaemonSequenceWithoutDrain(t *testing.T) {
	const next = "rendered-new"
	plan := updatePlan{config: next, filesChange: true, actions: []opv1.NodeDisruptionPolicyStatusAction{{Type: opv1.NoneStatusAction}}}
	steps, mcn := walkDaemon(t, plan)
	want := []string{
		"state=Working", "plan", "apply", "applied",
		"desiredDrain=" + UncordonRequest(next), "uncordoned", "currentConfig=" + next + ",state=Done",
	}
	if !reflect.DeepEqual(steps, want) {
		t.Fatalf("steps =\n%v\nwant\n%v", steps, want)
	}
	var got []string
	for _, u := range mcn {
		got = append(got, string(u.parent.state)+"="+string(u.parent.status)+":"+u.parent.message)
	}
	wantMCN := []string{
		"Updated=False:Node a needs an update",
		"UpdatePrepared=True:Update Compatible. Post Cfg Actions: [] Drain Required: false",
		"UpdateExecuted=Unknown:Node Drain Not required for this update.",
		"UpdateExecuted=Unknown:Updating the Files and OS on disk as a part of the in progress phase",
		"UpdateExecuted=True:Updated the Files and OS on disk as a part of the in progress phase",
		"UpdatePostActionComplete=True:Changes do not require a reboot",
		"Resumed=True:In desired config rendered-new. Resumed normal operations. Applying proper annotations.",
		"Updated=True:Node a Updated",
	}
	if !reflect.DeepEqual(got, wantMCN) {
		t.Fatalf("MachineConfigNode updates =\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(wantMCN, "\n"))
	}
	if c := mcn[2].child; c == nil || c.state != mcfgv1.MachineConfigNodeUpdateDrained || c.status != metav1.ConditionFalse ||
		c.reason != "UpdateExecutedDrained" || c.message != mcnDrainNotRequiredMessage {
		t.Errorf("Drained child = %+v", c)
	}
}

func TestScaledTimings(t *testing.T) {
	mco := RealTimings()
	if mco.UpdateDelay != 5*time.Second || mco.DrainHelperTimeout != 90*time.Second ||
		mco.DrainRequeueDelay != time.Minute || mco.DrainRequeueFailingThreshold != 10*time.Minute ||
		mco.DrainRequeueFailingDelay != 5*time.Minute || mco.DrainTimeout != time.Hour ||
		mco.DaemonDrainTimeout != time.Hour || mco.Reboot != time.Minute ||
		mco.PrepareUpdate != time.Second || mco.ApplyInPlace != 1250*time.Millisecond {
		t.Errorf("RealTimings differ from the MCO's: %+v", mco)
	}
	same, err := ScaledTimings(1)
	if err != nil || !reflect.DeepEqual(same, mco) {
		t.Errorf("ScaledTimings(1) = %+v, %v; want RealTimings", same, err)
	}
	fast, err := ScaledTimings(0.05)
	if err != nil {
		t.Fatal(err)
	}
	if fast.UpdateDelay != 250*time.Millisecond || fast.DrainHelperTimeout != 4500*time.Millisecond ||
		fast.DrainRequeueDelay != 3*time.Second || fast.DrainRequeueFailingThreshold != 30*time.Second ||
		fast.DrainRequeueFailingDelay != 15*time.Second || fast.DrainTimeout != 3*time.Minute ||
		fast.Reboot != 3*time.Second || fast.CordonBackoff.Duration != 500*time.Millisecond {
		t.Errorf("ScaledTimings(0.05) = %+v", fast)
	}
	tiny, err := ScaledTimings(1e-12)
	if err != nil {
		t.Fatal(err)
	}
	if tiny.DrainHelperTimeout <= 0 || tiny.UpdateDelay <= 0 {
		t.Errorf("tiny scale gave a non-positive delay: %+v (a zero drain timeout means none)", tiny)
	}
	for _, bad := range []float64{0, -1} {
		if _, err := ScaledTimings(bad); err == nil {
			t.Errorf("ScaledTimings(%v) accepted", bad)
		}
	}
}

func TestDrainRetrySchedule(t *testing.T) {
	timing := RealTimings()
	tests := []struct {
		failingFor    time.Duration
		wantAfter     time.Duration
		wantThreshold bool
		wantTimedOut  bool
	}{
		{failingFor: 0, wantAfter: time.Minute},
		{failingFor: 9 * time.Minute, wantAfter: time.Minute},
		{failingFor: 10 * time.Minute, wantAfter: time.Minute},
		{failingFor: 10*time.Minute + time.Second, wantAfter: 5 * time.Minute, wantThreshold: true},
		{failingFor: time.Hour, wantAfter: 5 * time.Minute, wantThreshold: true},
		{failingFor: time.Hour + time.Second, wantAfter: 5 * time.Minute, wantThreshold: true, wantTimedOut: true},
	}
	for _, tt := range tests {
		got := nextDrainRetry(tt.failingFor, timing)
		if got.after != tt.wantAfter || got.thresholdExceeded != tt.wantThreshold {
			t.Errorf("nextDrainRetry(%v) = %+v, want after %v threshold %v", tt.failingFor, got, tt.wantAfter, tt.wantThreshold)
		}
		if got := drainTimedOut(tt.failingFor, timing); got != tt.wantTimedOut {
			t.Errorf("drainTimedOut(%v) = %v, want %v", tt.failingFor, got, tt.wantTimedOut)
		}
	}
}
