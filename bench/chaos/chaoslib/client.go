package chaoslib

import (
	"io"
	"net/http"
	"sync"
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
	r.open.Add(1)
	resp, err := b.base.RoundTrip(req)
	if err != nil {
		r.open.Add(-1)
		return nil, err
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, open: &r.open}
	return resp, nil
}

// countedBody ends its request's count in replica.open when closed: a
// stream counts for as long as the client holds it.
type countedBody struct {
	io.ReadCloser
	open *atomic.Int64
	once sync.Once
}

func (c *countedBody) Close() error {
	c.once.Do(func() { c.open.Add(-1) })
	return c.ReadCloser.Close()
}
