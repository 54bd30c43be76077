package trigger

import "testing"

func TestPhaseString(t *testing.T) {
	want := map[Phase]string{
		PhaseNone: "None", PhasePredicted: "Predicted", PhaseTargeted: "Targeted", PhaseDraining: "Draining",
		PhaseDrained: "Drained", PhaseFailed: "Failed", PhaseOver: "Over", Phase(42): "Unknown", Phase(-1): "Unknown",
	}
	for p, w := range want {
		if got := p.String(); got != w {
			t.Errorf("Phase(%d).String() = %q, want %q", int(p), got, w)
		}
	}
}

func TestSignalActiveAndCurrentDrain(t *testing.T) {
	tests := []struct {
		phase       Phase
		active      bool
		currentSame bool
	}{
		{PhaseNone, false, false},
		{PhasePredicted, true, true},
		{PhaseTargeted, true, true},
		{PhaseDraining, true, true},
		{PhaseDrained, true, true},
		// A failed drain is over for eviction, not for the memory of a failed surge.
		{PhaseFailed, false, true},
		{PhaseOver, false, false},
	}
	for _, tt := range tests {
		s := Signal{Phase: tt.phase, Drain: "d"}
		if s.Active() != tt.active {
			t.Errorf("%v: Active() = %v, want %v", tt.phase, s.Active(), tt.active)
		}
		if got := s.CurrentDrain() == "d"; got != tt.currentSame {
			t.Errorf("%v: CurrentDrain() = %q", tt.phase, s.CurrentDrain())
		}
	}
}

func TestDominant(t *testing.T) {
	sig := func(source Name, p Phase) Signal { return Signal{Source: source, Phase: p, Drain: string(source)} }
	tests := []struct {
		name    string
		signals []Signal
		want    Signal
	}{
		{"none", nil, Signal{}},
		{"one", []Signal{sig("a", PhaseOver)}, sig("a", PhaseOver)},
		{"draining beats targeted", []Signal{sig("a", PhaseTargeted), sig("b", PhaseDraining)}, sig("b", PhaseDraining)},
		{"targeted beats drained", []Signal{sig("a", PhaseDrained), sig("b", PhaseTargeted)}, sig("b", PhaseTargeted)},
		{"drained beats predicted", []Signal{sig("a", PhasePredicted), sig("b", PhaseDrained)}, sig("b", PhaseDrained)},
		{"predicted beats failed", []Signal{sig("a", PhaseFailed), sig("b", PhasePredicted)}, sig("b", PhasePredicted)},
		{"failed beats over", []Signal{sig("a", PhaseOver), sig("b", PhaseFailed)}, sig("b", PhaseFailed)},
		{"over beats none", []Signal{sig("a", PhaseNone), sig("b", PhaseOver)}, sig("b", PhaseOver)},
		{"tie goes to the first", []Signal{sig("a", PhaseDraining), sig("b", PhaseDraining)}, sig("a", PhaseDraining)},
	}
	for _, tt := range tests {
		if got := Dominant(tt.signals...); got != tt.want {
			t.Errorf("%s: Dominant() = %+v, want %+v", tt.name, got, tt.want)
		}
	}
}
