// Command bundle generates the OLM bundle (bundle/) from the kustomize installation for OpenShift
// (manifests/overlays/openshift, built on manifests/base):
// the ClusterServiceVersion's install strategy, cluster permissions and permissions come from the
// rendered Deployment and RBAC, the Surge CRD is the owned CRD, and every other object the bundle
// may carry is copied as is. `make bundle` runs it; its tests validate the result with
// operator-framework's validators and fail when bundle/ is stale.
package main

import (
	"flag"
	"fmt"
	"os"
)

func main() {
	var cfg Config
	var out string
	flag.StringVar(&cfg.Base, "base", DefaultBase, "kustomization to generate the bundle from")
	flag.StringVar(&out, "out", "../../bundle", "bundle directory to write")
	flag.StringVar(&cfg.Version, "version", DefaultVersion, "semantic version of the bundle, without v")
	flag.StringVar(&cfg.Image, "image", "", "operator image (default quay.io/drain-guardian/drain-guardian:v<version>)")
	flag.StringVar(&cfg.MustGatherImage, "must-gather-image", "", "must-gather image (default quay.io/drain-guardian/drain-guardian-must-gather:v<version>)")
	flag.StringVar(&cfg.Replaces, "replaces", "", "name of the CSV this one replaces")
	flag.Parse()
	cfg.defaults()
	files, err := Generate(cfg)
	if err == nil {
		err = Write(out, files)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "bundle:", err)
		os.Exit(1)
	}
	fmt.Printf("bundle: %d files written to %s\n", len(files), out)
}
