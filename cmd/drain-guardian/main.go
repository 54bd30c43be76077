// Command drain-guardian resolves MachineConfigPool drains blocked by PodDisruptionBudgets that protect
// single-replica workloads, by surging the workload until the update is over.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/version"
)

func main() {
	enableStreamingLists()
	if err := newRootCommand().Execute(); err != nil {
		// check ends with its own exit codes (1 and 2 are answers, not failures).
		var exit *exitError
		if errors.As(err, &exit) {
			if exit.err != nil {
				fmt.Fprintln(os.Stderr, "drain-guardian:", exit.err)
			}
			os.Exit(exit.code)
		}
		fmt.Fprintln(os.Stderr, "drain-guardian:", err)
		os.Exit(1)
	}
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "drain-guardian",
		Short:         "Keeps PodDisruptionBudgets from stalling MachineConfigPool updates, without downtime",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCommand(), newCheckCommand(), newPrepareCommand(), &cobra.Command{
		Use:   "version",
		Short: "Print the version",
		Args:  cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) {
			fmt.Fprintf(cmd.OutOrStdout(), "drain-guardian %s (revision %s, %s)\n", version.Version, version.Revision, version.GoVersion())
		},
	})
	return root
}

func newRunCommand() *cobra.Command {
	opts := options.NewOptions()
	cmd := &cobra.Command{
		Use:   "run",
		Short: "Run the guardian",
		Long: `Run the guardian: watch MachineConfigPools, nodes and pods; when a PodDisruptionBudget blocks
(or is about to block) a node's drain, surge the owning workload, evict the blocked pod once its
replacement is Ready elsewhere, and restore the original replica settings after the update.

Every flag can also be set with an environment variable: --some-flag is DRAIN_GUARDIAN_SOME_FLAG.
A flag given on the command line wins over the environment.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := options.ApplyEnv(cmd.Flags(), os.LookupEnv); err != nil {
				return err
			}
			if err := opts.Validate(); err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			return run(ctx, opts)
		},
	}
	opts.AddFlags(cmd.Flags())
	return cmd
}
