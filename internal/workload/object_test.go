package workload

import "testing"

func TestIgnoredByAnnotation(t *testing.T) {
	tests := map[string]bool{"true": true, "True": true, "1": true, "false": false, "": false, "yes": false}
	for v, want := range tests {
		if got := IgnoredByAnnotation(map[string]string{IgnoreAnnotation: v}); got != want {
			t.Errorf("IgnoredByAnnotation(%q) = %v, want %v", v, got, want)
		}
	}
	if IgnoredByAnnotation(nil) {
		t.Error("IgnoredByAnnotation(nil) = true")
	}
	if obj := testObject(t, KindDeployment, "1", map[string]string{IgnoreAnnotation: "true"}, `{}`); !obj.Ignored() {
		t.Error("Object.Ignored() = false on an object carrying the opt-out annotation")
	}
	if obj := testObject(t, KindDeployment, "1", map[string]string{"team": "ml"}, `{}`); obj.Ignored() {
		t.Error("Object.Ignored() = true on an object without the opt-out annotation")
	}
}
