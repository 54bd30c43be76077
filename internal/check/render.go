package check

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"sigs.k8s.io/yaml"

	"github.com/drain-guardian/drain-guardian/internal/mco"
)

// Formats are the output formats of Render.
var Formats = []string{"table", "json", "yaml"}

// Render writes the report in format: "table" (aligned, for a terminal), "json" or "yaml".
func Render(w io.Writer, r *Report, format string) error {
	switch format {
	case "table":
		return renderTable(w, r)
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(r)
	case "yaml":
		b, err := yaml.Marshal(r)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	return fmt.Errorf("unknown output format %q: want one of %s", format, strings.Join(Formats, ", "))
}

func renderTable(w io.Writer, r *Report) error {
	var b strings.Builder
	if r.Mode == "cordon" {
		b.WriteString("No MachineConfigPools: every node as one pool, by name (cordon mode).\n")
	}
	for i, p := range r.Pools {
		if i > 0 || r.Mode == "cordon" {
			b.WriteString("\n")
		}
		writePool(&b, p)
	}
	b.WriteString("\n" + summary(r) + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}

func writePool(b *strings.Builder, p Pool) {
	defer writePrepare(b, p.Prepare)
	switch {
	case p.Drain == mco.NeedNoDrain.String():
		fmt.Fprintf(b, "POOL %s: no-drain: its update is applied without cordon or drain (%s)\n", p.Name, p.DrainReason)
		return
	case len(p.Nodes) == 0:
		fmt.Fprintf(b, "POOL %s: no node to update\n", p.Name)
		return
	case p.Name == NoPool:
		fmt.Fprintf(b, "POOL %s: %s by name, each drained on its own when cordoned\n", p.Name, nodes(len(p.Nodes)))
	case len(p.Nodes) == 1:
		fmt.Fprintf(b, "POOL %s: 1 node to update, %d at a time\n", p.Name, p.MaxUnavailable)
	default:
		fmt.Fprintf(b, "POOL %s: %d nodes to update, %d at a time, in this order\n", p.Name, len(p.Nodes), p.MaxUnavailable)
	}
	tw := tabwriter.NewWriter(b, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "  WAVE\tNODE\tSTAGE\tPOD\tPDB\tWORKLOAD\tVERDICT\tGUARDIAN WILL")
	for _, n := range p.Nodes {
		stage := dash(n.Stage)
		if len(n.Blocks) == 0 {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t-\t-\t-\t-\tnothing: no pod blocks the drain\n", n.Wave, n.Name, stage)
			continue
		}
		for _, bl := range n.Blocks {
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s/%s\t%s\t%s\t%s\t%s\n", n.Wave, n.Name, stage, bl.Namespace, bl.Pod, bl.PDB, dash(bl.Workload), bl.Verdict, action(bl))
		}
	}
	_ = tw.Flush()
	if p.Drain == mco.NeedUnknown.String() {
		fmt.Fprintf(b, "  drain-unknown: %s; predicted as if the update drained\n", p.DrainReason)
	}
	writePlan(b, p.Plan)
}

// writePrepare says how far a pool being prepared is: what `drain-guardian prepare` waits for.
func writePrepare(b *strings.Builder, pr *Prepare) {
	if pr == nil {
		return
	}
	total := pr.Prepared + pr.Preparing + len(pr.Waiting) + len(pr.Unresolvable)
	if total == pr.Prepared {
		fmt.Fprintf(b, "  PREPARED: %d of %d workloads that would stall the update have a Ready extra replica\n", pr.Prepared, total)
		return
	}
	fmt.Fprintf(b, "  PREPARING: %d of %d prepared, %d preparing, %d waiting, %d unresolvable\n",
		pr.Prepared, total, pr.Preparing, len(pr.Waiting), len(pr.Unresolvable))
	for _, w := range pr.Waiting {
		fmt.Fprintf(b, "    waiting: %s\n", w)
	}
	for _, u := range pr.Unresolvable {
		fmt.Fprintf(b, "    unresolvable: %s\n", u)
	}
}

func writePlan(b *strings.Builder, plan Plan) {
	fmt.Fprintf(b, "  Plan: %s a drain", blocksOf(plan.Blocking))
	if plan.Blocking == 0 {
		b.WriteString("\n")
		return
	}
	fmt.Fprintf(b, "; %d resolvable", plan.Resolvable)
	if stalls := plan.Blocking - plan.Resolvable; stalls > 0 {
		fmt.Fprintf(b, ", %d will stall (%s)", stalls, countsOf(plan.Stalls))
	}
	b.WriteString("\n")
	for _, res := range plan.Resources {
		fmt.Fprintf(b, "    %s: %d extra needed at peak, %d free", res.Name, res.Peak, res.Free)
		if res.Missing > 0 {
			fmt.Fprintf(b, ", %d missing", res.Missing)
		}
		b.WriteString("\n")
	}
	switch plan.AddedTimeSource {
	case "observed":
		fmt.Fprintf(b, "    Added time: about %s (observed replacement-ready times)\n", plan.AddedTime)
	case "estimate":
		fmt.Fprintf(b, "    Added time: about %s (from --ready-estimate)\n", plan.AddedTime)
	case "unknown":
		b.WriteString("    Added time: unknown (no observed replacement-ready time; pass --ready-estimate or --metrics-url)\n")
	}
}

// action is what the guardian will do about a block: the fields it changes, or why it will not.
func action(b Block) string {
	if !b.Verdict.Resolvable() {
		return "stall: " + b.Detail
	}
	parts := make([]string, 0, len(b.Changes))
	for _, c := range b.Changes {
		from := "unset"
		if c.From != nil {
			from = fmt.Sprint(*c.From)
		}
		parts = append(parts, fmt.Sprintf("%s %s->%d", strings.ReplaceAll(strings.TrimPrefix(c.Path, "/"), "/", "."), from, c.To))
	}
	out := "surge " + strings.Join(parts, ", ")
	if len(b.Extra) > 0 {
		out += " (takes " + extraOf(b.Extra) + ")"
	}
	if b.Detail != "" {
		out += " " + b.Detail
	}
	return out
}

func summary(r *Report) string {
	blocks := r.Blocks()
	stalls := 0
	for _, b := range blocks {
		if !b.Verdict.Resolvable() {
			stalls++
		}
	}
	switch r.ExitCode() {
	case ExitClear:
		return "Result: no pod blocks a drain (exit 0)."
	case ExitResolvable:
		return fmt.Sprintf("Result: %s a drain; the guardian resolves all of them (exit 1).", blocksOf(len(blocks)))
	}
	return fmt.Sprintf("Result: %d of %s blocking a drain will stall the update (exit 2).", stalls, pods(len(blocks)))
}

// blocksOf is "1 pod blocks" or "n pods block".
func blocksOf(n int) string {
	if n == 1 {
		return "1 pod blocks"
	}
	return fmt.Sprintf("%d pods block", n)
}

func nodes(n int) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func countsOf(m map[Verdict]int) string {
	var parts []string
	for _, v := range Verdicts() {
		if m[v] > 0 {
			parts = append(parts, fmt.Sprintf("%s %d", v, m[v]))
		}
	}
	return strings.Join(parts, ", ")
}

func extraOf(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, n := range names {
		parts = append(parts, fmt.Sprintf("%d %s", m[n], n))
	}
	return strings.Join(parts, ", ")
}
