package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	mcfgv1 "github.com/openshift/api/machineconfiguration/v1"
	mcfgclient "github.com/openshift/client-go/machineconfiguration/clientset/versioned"
	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/drain-guardian/drain-guardian/internal/guardian"
	"github.com/drain-guardian/drain-guardian/internal/version"
)

// prepareFieldManager names the admin's `drain-guardian prepare` in the pool's managedFields: the
// daemon never writes pools.
const prepareFieldManager = "drain-guardian-prepare"

func newPrepareCommand() *cobra.Command {
	var kubeconfig, pool string
	var undo bool
	cmd := &cobra.Command{
		Use:   "prepare --pool NAME [--undo]",
		Short: "Ask the guardian to prepare a pool for its next update (or stop preparing it)",
		Long: `Set the annotation drain-guardian.io/prepare=true on a MachineConfigPool, as the admin running the
command: the guardian then surges, ahead of the pool's pending update, every workload that would stall
it, as far as spare capacity allows, and holds those surges until the pool is Updated. --undo removes
the annotation: the guardian restores what it prepared.

The window workflow: pause the pool (spec.paused: true), let the new config render, run prepare, wait
until 'drain-guardian check' (or the pool's PoolPrepared Event) says every workload is prepared, or
the pool's PoolPartlyPrepared Event says the rest wait for capacity, then unpause: the pool updates at the speed of two-replica workloads and the surges are restored once it is
Updated. Writing a MachineConfigPool takes cluster-admin rights.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if pool == "" {
				return fmt.Errorf("--pool: required")
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			cfg, err := restConfig(kubeconfig)
			if err != nil {
				return err
			}
			cfg.UserAgent = "drain-guardian-prepare/" + version.Version
			client, err := mcfgclient.NewForConfig(cfg)
			if err != nil {
				return fmt.Errorf("machineconfiguration client: %w", err)
			}
			return setPrepare(ctx, client, cmd.OutOrStdout(), pool, !undo)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&kubeconfig, "kubeconfig", "", "Path to a kubeconfig; empty: in-cluster config or $KUBECONFIG.")
	fs.StringVar(&pool, "pool", "", "The MachineConfigPool to prepare.")
	fs.BoolVar(&undo, "undo", false, "Remove the request: the guardian restores what it prepared.")
	return cmd
}

// setPrepare sets (or removes) the pool's prepare annotation with a merge patch that touches nothing
// else, and says what follows.
func setPrepare(ctx context.Context, client mcfgclient.Interface, out io.Writer, name string, prepare bool) error {
	var value any // nil removes the annotation
	if prepare {
		value = "true"
	}
	patch, err := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]any{guardian.PrepareAnnotation: value}}})
	if err != nil {
		return err
	}
	pool, err := client.MachineconfigurationV1().MachineConfigPools().Patch(ctx, name, types.MergePatchType, patch,
		metav1.PatchOptions{FieldManager: prepareFieldManager})
	if err != nil {
		return fmt.Errorf("patching MachineConfigPool %s: %w", name, err)
	}
	if !prepare {
		_, err = fmt.Fprintf(out, "pool %s: prepare request removed; the guardian restores what it prepared\n", name)
		return err
	}
	_, err = fmt.Fprintf(out, "pool %s: prepare requested; %s\n", name, pendingState(pool))
	return err
}

// pendingState says whether the pool has an update to prepare for.
func pendingState(pool *mcfgv1.MachineConfigPool) string {
	config := guardian.PendingConfig(pool)
	switch {
	case config == "":
		return "it has no pending update: nothing to prepare until a new config renders"
	case pool.Spec.Paused:
		return fmt.Sprintf("pending update to %s (paused); run 'drain-guardian check' until every workload is prepared, then unpause", config)
	}
	return fmt.Sprintf("update to %s not paused: the guardian prepares the nodes the MCO has not reached yet", config)
}
