package check

import (
	"strings"
	"testing"
	"time"
)

func TestReadyTimesFromText(t *testing.T) {
	for name, text := range map[string]string{
		"daemon /metrics": `# HELP drain_guardian_replacement_ready_duration_seconds Time from a surge to its replacement pod being Ready on another node.
# TYPE drain_guardian_replacement_ready_duration_seconds histogram
drain_guardian_replacement_ready_duration_seconds_bucket{kind="InferenceService",le="+Inf"} 2
drain_guardian_replacement_ready_duration_seconds_sum{kind="InferenceService"} 300
drain_guardian_replacement_ready_duration_seconds_count{kind="InferenceService"} 2
drain_guardian_replacement_ready_duration_seconds_bucket{kind="Deployment",le="+Inf"} 0
drain_guardian_replacement_ready_duration_seconds_sum{kind="Deployment"} 0
drain_guardian_replacement_ready_duration_seconds_count{kind="Deployment"} 0
`,
		"Prometheus /federate": `drain_guardian_replacement_ready_duration_seconds_sum{kind="InferenceService",pod="a"} 100 1700000000000
drain_guardian_replacement_ready_duration_seconds_count{kind="InferenceService",pod="a"} 1 1700000000000
drain_guardian_replacement_ready_duration_seconds_sum{kind="InferenceService",pod="b"} 200 1700000000000
drain_guardian_replacement_ready_duration_seconds_count{kind="InferenceService",pod="b"} 1 1700000000000
`,
	} {
		t.Run(name, func(t *testing.T) {
			got, err := ReadyTimesFromText(strings.NewReader(text))
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != 1 || got["InferenceService"] != 150*time.Second {
				t.Errorf("ready times %v, want InferenceService 2m30s only (no observation for Deployment)", got)
			}
		})
	}
	if _, err := ReadyTimesFromText(strings.NewReader("not metrics {")); err == nil {
		t.Error("garbage parsed without an error")
	}
}
