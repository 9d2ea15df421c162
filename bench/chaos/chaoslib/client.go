package chaoslib

import (
	"net/http"
	"sync/atomic"
)

// balancer is the clients' load balancer: each request goes to the next
// replica serving, as an HTTP load balancer in front of the replicas
// would send it. Keep-alives are off, so a killed replica never leaves a
// pooled connection half-used, and every request may land elsewhere.
type balancer struct {
	topo *topology
	base http.RoundTripper
	n    atomic.Uint64
	// admin picks the admin port instead of the client port.
	admin bool
}

func newBalancer(t *topology, admin bool) *balancer {
	return &balancer{topo: t, admin: admin, base: &http.Transport{DisableKeepAlives: true, DisableCompression: true}}
}

func (b *balancer) RoundTrip(req *http.Request) (*http.Response, error) {
	reps := b.topo.live()
	if len(reps) == 0 {
		reps = b.topo.replicas // all down: the request fails as it would behind an LB
	}
	r := reps[b.n.Add(1)%uint64(len(reps))]
	req = req.Clone(req.Context())
	req.URL.Host = r.clientAddr
	if b.admin {
		req.URL.Host = r.adminAddr
	}
	req.Host = req.URL.Host
	return b.base.RoundTrip(req)
}
