package controller

import (
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/clock"
)

// scaleDiscoveryTTL is how long a group version's resource list is trusted; owners of unknown kinds
// are rare, so a short-lived cache keeps discovery cheap without missing new CRDs for long.
const scaleDiscoveryTTL = 5 * time.Minute

// scaleDiscovery answers whether an owner kind has a /scale subresource, from cached discovery.
type scaleDiscovery struct {
	discovery discovery.DiscoveryInterface
	ttl       time.Duration
	clock     clock.PassiveClock
	mu        sync.Mutex
	cache     map[string]cachedResources
}

type cachedResources struct {
	list    *metav1.APIResourceList
	fetched time.Time
}

// lookup implements workload.ScaleResource.
func (d *scaleDiscovery) lookup(apiVersion, kind string) (string, bool, error) {
	list, err := d.resources(apiVersion)
	if err != nil || list == nil {
		return "", false, err
	}
	names := map[string]bool{}
	for _, r := range list.APIResources {
		names[r.Name] = true
	}
	for _, r := range list.APIResources {
		if r.Kind == kind && r.Namespaced && !strings.Contains(r.Name, "/") && names[r.Name+"/scale"] {
			return r.Name, true, nil
		}
	}
	return "", false, nil
}

func (d *scaleDiscovery) resources(apiVersion string) (*metav1.APIResourceList, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if c, ok := d.cache[apiVersion]; ok && d.clock.Since(c.fetched) < d.ttl {
		return c.list, nil
	}
	list, err := d.discovery.ServerResourcesForGroupVersion(apiVersion)
	if apierrors.IsNotFound(err) {
		list, err = nil, nil
	}
	if err != nil {
		return nil, err
	}
	if d.cache == nil {
		d.cache = map[string]cachedResources{}
	}
	d.cache[apiVersion] = cachedResources{list: list, fetched: d.clock.Now()}
	return list, nil
}
