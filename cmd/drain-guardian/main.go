// Command drain-guardian resolves MachineConfigPool drains blocked by PodDisruptionBudgets that protect
// single-replica workloads, by surging the workload until the update is over.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/drain-guardian/drain-guardian/internal/options"
	"github.com/drain-guardian/drain-guardian/internal/version"
)

func main() {
	enableStreamingLists()
	if err := commandFor(os.Args[0], os.Args[1:]).Execute(); err != nil {
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

// The names the binary answers to besides drain-guardian, each installed as a symlink to it.
const (
	// kubectlPlugin and ocPlugin make it `kubectl drain-guardian` and `oc drain-guardian`: both
	// run an executable named <cli>-<name> found on PATH, with dashes in the name as underscores.
	kubectlPlugin = "kubectl-drain_guardian"
	ocPlugin      = "oc-drain_guardian"
	// mustGatherEntry is the command `oc adm must-gather` runs in the image.
	mustGatherEntry = "gather"
)

// commandFor returns the command tree for the name the binary was started by (argv[0]) and its
// arguments: as a kubectl or oc plugin the help speaks of "oc drain-guardian"; as /usr/bin/gather
// it runs `gather` with the must-gather defaults.
func commandFor(argv0 string, args []string) *cobra.Command {
	name := strings.TrimSuffix(filepath.Base(argv0), ".exe")
	root := newRootCommand()
	switch name {
	case kubectlPlugin, ocPlugin:
		// Cobra's display name for plugins: the usage lines read "oc drain-guardian check".
		root.Annotations = map[string]string{cobra.CommandDisplayNameAnnotation: strings.TrimSuffix(name, "-drain_guardian") + " drain-guardian"}
	case mustGatherEntry:
		root = newGatherCommand(true)
		root.Use = mustGatherEntry
		root.SilenceUsage, root.SilenceErrors = true, true
	}
	root.SetArgs(args)
	return root
}

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "drain-guardian",
		Short:         "Keeps PodDisruptionBudgets from stalling MachineConfigPool updates, without downtime",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newRunCommand(), newCheckCommand(), newGatherCommand(false), newPrepareCommand(), &cobra.Command{
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
