package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/securecookie"
	"golang.org/x/crypto/argon2"
	"golang.org/x/time/rate"
)

// login is one signed-in browser: a random id (bound to its CSRF token) and
// the moment the login ends.
type login struct {
	ID      string `json:"i"`
	Expires int64  `json:"e"` // unix milliseconds
}

// authenticator checks the console password and issues and verifies the
// signed login cookie. Cookies are stateless: every replica sharing the
// password and the database derives the same keys, and changing the
// password invalidates every cookie at once.
type authenticator struct {
	password   [32]byte // sha256 of the password, compared in constant time
	cookies    *securecookie.SecureCookie
	csrfKey    []byte
	cookieName string
	secure     bool
	ttl        time.Duration
	now        func() time.Time
}

func newAuthenticator(password, salt string, secure bool, ttl time.Duration, now func() time.Time) *authenticator {
	// A slow KDF, salted per deployment: a leaked cookie must not make
	// offline guessing of an operator-chosen password cheap.
	keys := argon2.IDKey([]byte(password), []byte("bae-console:"+salt), 2, 19*1024, 1, 64)
	sc := securecookie.New(keys[:32], nil)
	sc.SetSerializer(securecookie.JSONEncoder{})
	sc.MaxAge(int(ttl/time.Second) + 60) // backstop; Expires is what counts
	name := "bae_console"
	if secure {
		name = "__Host-bae_console" // the prefix makes browsers insist on Secure, Path=/ and no Domain
	}
	return &authenticator{
		password: sha256.Sum256([]byte(password)), cookies: sc, csrfKey: keys[32:],
		cookieName: name, secure: secure, ttl: ttl, now: now,
	}
}

func (a *authenticator) checkPassword(attempt string) bool {
	sum := sha256.Sum256([]byte(attempt))
	return subtle.ConstantTimeCompare(sum[:], a.password[:]) == 1
}

// issue sets a fresh login cookie.
func (a *authenticator) issue(w http.ResponseWriter) error {
	b := make([]byte, 18)
	if _, err := rand.Read(b); err != nil {
		return err
	}
	l := login{ID: base64.RawURLEncoding.EncodeToString(b), Expires: a.now().Add(a.ttl).UnixMilli()}
	v, err := a.cookies.Encode(a.cookieName, l)
	if err != nil {
		return err
	}
	http.SetCookie(w, &http.Cookie{
		Name: a.cookieName, Value: v, Path: "/", MaxAge: int(a.ttl / time.Second),
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteStrictMode,
	})
	return nil
}

func (a *authenticator) clear(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{
		Name: a.cookieName, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: a.secure, SameSite: http.SameSiteStrictMode,
	})
}

var errNoLogin = errors.New("not logged in")

// verify returns the request's login if its cookie is genuine and unexpired
// now. Streams call it again on every wake-up.
func (a *authenticator) verify(r *http.Request) (login, error) {
	c, err := r.Cookie(a.cookieName)
	if err != nil {
		return login{}, errNoLogin
	}
	var l login
	if err := a.cookies.Decode(a.cookieName, c.Value, &l); err != nil {
		return login{}, errNoLogin
	}
	if l.ID == "" || a.now().UnixMilli() >= l.Expires {
		return login{}, errNoLogin
	}
	return l, nil
}

// csrfToken is bound to one login, so a token seen by one browser is
// useless with another's cookie.
func (a *authenticator) csrfToken(l login) string {
	m := hmac.New(sha256.New, a.csrfKey)
	m.Write([]byte(l.ID))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

func (a *authenticator) checkCSRF(l login, token string) bool {
	return subtle.ConstantTimeCompare([]byte(a.csrfToken(l)), []byte(token)) == 1
}

type loginKey struct{}

func withLogin(ctx context.Context, l login) context.Context {
	return context.WithValue(ctx, loginKey{}, l)
}

func loginFrom(ctx context.Context) login {
	l, _ := ctx.Value(loginKey{}).(login)
	return l
}

// loginLimiter bounds password attempts per client address (per replica):
// a burst of loginBurst, then one every loginEvery.
type loginLimiter struct {
	mu    sync.Mutex
	every time.Duration
	burst int
	now   func() time.Time
	addrs map[string]*rate.Limiter
}

const (
	loginBurst = 5
	loginEvery = 12 * time.Second
	// maxTrackedAddrs bounds the limiter's memory; past it, full buckets
	// (addresses that are not currently limited) are forgotten.
	maxTrackedAddrs = 4096
)

func newLoginLimiter(now func() time.Time) *loginLimiter {
	return &loginLimiter{every: loginEvery, burst: loginBurst, now: now, addrs: map[string]*rate.Limiter{}}
}

// allow takes one attempt for addr, or reports how long to wait.
func (l *loginLimiter) allow(addr string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	lim := l.addrs[addr]
	if lim == nil {
		if len(l.addrs) >= maxTrackedAddrs {
			for k, v := range l.addrs {
				if v.TokensAt(now) >= float64(l.burst) {
					delete(l.addrs, k)
				}
			}
		}
		lim = rate.NewLimiter(rate.Every(l.every), l.burst)
		l.addrs[addr] = lim
	}
	res := lim.ReserveN(now, 1)
	if d := res.DelayFrom(now); d > 0 {
		res.CancelAt(now)
		return false, d
	}
	return true, 0
}

func remoteAddr(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
