package sandbox

import (
	"cmp"
	"context"
	"log/slog"
	"slices"
	"sync"
)

// ImageState is the provisioning state of one profile-declared image, as
// sent on the wire.
type ImageState string

const (
	StatusPending   ImageState = "pending"
	StatusAvailable ImageState = "available"
	StatusError     ImageState = "error"
)

// ImageStatus is one entry of the session.sandbox.available payload and of
// GET /admin/v1/sandbox-status. Detail is set only for StatusError.
type ImageStatus struct {
	Name   string     `json:"name"`
	Status ImageState `json:"status"`
	Detail string     `json:"detail,omitempty"`
}

// ProfileStatus is the status of every image one profile declares.
type ProfileStatus struct {
	ProfileID string        `json:"profile_id"`
	Images    []ImageStatus `json:"images"`
}

// Provisioner makes profiles' declared images present in the background and
// remembers, per profile, how that went. State is in memory only: the server
// re-provisions every declaring profile at start-up.
//
// Status is kept per profile (never per image globally) because a profile is
// a trust boundary: a session must only ever be told about its own profile's
// images, even when another profile's identical image is known.
type Provisioner struct {
	driver Driver
	log    *slog.Logger

	// ctx bounds every background pull; Close cancels it.
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu       sync.Mutex
	nextGen  uint64
	profiles map[string]*profileState
}

// profileState is the outcome of the latest Provision call for a profile.
type profileState struct {
	// gen identifies the Provision call; results of superseded calls are
	// dropped so that a slow old pull cannot overwrite a newer list.
	gen    uint64
	images map[string]ImageStatus
	done   chan struct{}
}

// NewProvisioner returns a Provisioner ensuring images with d, logging to
// logger.
func NewProvisioner(d Driver, logger *slog.Logger) *Provisioner {
	ctx, cancel := context.WithCancel(context.Background())
	return &Provisioner{
		driver:   d,
		log:      logger,
		ctx:      ctx,
		cancel:   cancel,
		profiles: make(map[string]*profileState),
	}
}

// Provision replaces profileID's image list: every image is pending at once,
// then a background goroutine ensures them one after the other (parallel
// pulls of large images would only compete for the same disk and network).
// It never blocks on the engine. An empty list forgets the profile.
func (p *Provisioner) Provision(profileID string, images []string) {
	images = uniq(images)
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(images) == 0 {
		delete(p.profiles, profileID)
		return
	}
	p.nextGen++
	st := &profileState{
		gen:    p.nextGen,
		images: make(map[string]ImageStatus, len(images)),
		done:   make(chan struct{}),
	}
	for _, name := range images {
		st.images[name] = ImageStatus{Name: name, Status: StatusPending}
	}
	p.profiles[profileID] = st
	if p.ctx.Err() != nil {
		// Closed: keep reporting pending rather than start work nobody awaits.
		close(st.done)
		return
	}
	p.wg.Add(1)
	go p.run(profileID, st.gen, images, st.done)
}

func (p *Provisioner) run(profileID string, gen uint64, images []string, done chan struct{}) {
	defer p.wg.Done()
	defer close(done)
	for _, image := range images {
		if !p.isCurrent(profileID, gen) || p.ctx.Err() != nil {
			return
		}
		err := p.driver.EnsureImage(p.ctx, image)
		if p.ctx.Err() != nil {
			return
		}
		status := ImageStatus{Name: image, Status: StatusAvailable}
		if err != nil {
			status = ImageStatus{Name: image, Status: StatusError, Detail: err.Error()}
			p.log.Error("failed to ensure sandbox image", "profile_id", profileID, "image", image, "error", err)
		} else {
			p.log.Info("sandbox image available", "profile_id", profileID, "image", image)
		}
		p.record(profileID, gen, status)
	}
}

func (p *Provisioner) isCurrent(profileID string, gen uint64) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	st, ok := p.profiles[profileID]
	return ok && st.gen == gen
}

func (p *Provisioner) record(profileID string, gen uint64, status ImageStatus) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if st, ok := p.profiles[profileID]; ok && st.gen == gen {
		st.images[status.Name] = status
	}
}

// Forget drops profileID (the profile was deleted); an in-flight provisioning
// run for it stops after its current image.
func (p *Provisioner) Forget(profileID string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.profiles, profileID)
}

// Images returns the status of exactly images, in order, as recorded for
// profileID; anything not recorded for that profile reads as pending. It
// never consults another profile's records.
func (p *Provisioner) Images(profileID string, images []string) []ImageStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	st := p.profiles[profileID]
	out := make([]ImageStatus, 0, len(images))
	for _, name := range images {
		s, ok := ImageStatus{}, false
		if st != nil {
			s, ok = st.images[name]
		}
		if !ok {
			s = ImageStatus{Name: name, Status: StatusPending}
		}
		out = append(out, s)
	}
	return out
}

// Status returns every provisioned profile's images, sorted by profile id
// then image name.
func (p *Provisioner) Status() []ProfileStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ProfileStatus, 0, len(p.profiles))
	for id, st := range p.profiles {
		ps := ProfileStatus{ProfileID: id, Images: make([]ImageStatus, 0, len(st.images))}
		for _, s := range st.images {
			ps.Images = append(ps.Images, s)
		}
		slices.SortFunc(ps.Images, func(a, b ImageStatus) int { return cmp.Compare(a.Name, b.Name) })
		out = append(out, ps)
	}
	slices.SortFunc(out, func(a, b ProfileStatus) int { return cmp.Compare(a.ProfileID, b.ProfileID) })
	return out
}

// Wait blocks until the latest Provision run for profileID has finished (or
// ctx ends). It returns at once for a profile with nothing in flight. Meant
// for tests and orderly start-up.
func (p *Provisioner) Wait(ctx context.Context, profileID string) error {
	p.mu.Lock()
	st := p.profiles[profileID]
	p.mu.Unlock()
	if st == nil {
		return nil
	}
	select {
	case <-st.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Close cancels in-flight pulls and waits for the background goroutines.
// Statuses stay readable.
func (p *Provisioner) Close() {
	// Cancel under mu so no Provision can pass its closed check and Add to wg
	// while Wait runs.
	p.mu.Lock()
	p.cancel()
	p.mu.Unlock()
	p.wg.Wait()
}

// uniq drops empty and repeated names, keeping first-seen order.
func uniq(images []string) []string {
	seen := make(map[string]bool, len(images))
	out := make([]string, 0, len(images))
	for _, s := range images {
		if s == "" || seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
	}
	return out
}
