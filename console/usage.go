package console

import (
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/bae-go/bae-go/api"
	"github.com/bae-go/bae-go/api/wire"
)

// usageDays are the ranges the usage page offers.
var usageDays = []int{7, 30, 90}

// dayBar is one day of the usage chart: its tokens stacked by kind.
type dayBar struct {
	Day   string
	X     float64
	W     float64
	Segs  []barSeg
	Title string
	// Label is shown under every few bars.
	Label string
}

type barSeg struct {
	Class string
	Y, H  float64
}

// usageChart is the per-day bar chart, laid out here so the template only
// places numbers: an SVG in the page, no script.
type usageChart struct {
	Width, Height, PlotTop, PlotBottom float64
	Bars                               []dayBar
	// Ticks are the value axis' gridlines.
	Ticks []chartTick
	Max   int64
}

type chartTick struct {
	Y     float64
	Label string
}

const (
	chartW, chartH     = 760.0, 240.0
	chartLeft          = 56.0
	chartTop, chartBot = 12.0, 206.0
)

// buildChart lays out one bar per day from from to to, days without usage
// as gaps.
func buildChart(days []wire.UsageGroup, from, to time.Time) usageChart {
	byDay := map[string]wire.UsageGroup{}
	var top int64
	for _, d := range days {
		byDay[d.Key] = d
		top = max(top, d.TotalTokens)
	}
	ch := usageChart{Width: chartW, Height: chartH, PlotTop: chartTop, PlotBottom: chartBot, Max: top}
	n := int(to.Sub(from).Hours()/24) + 1
	scale := niceCeil(top)
	slot := (chartW - chartLeft - 8) / float64(n)
	for i := 0; i <= 4; i++ {
		v := scale * int64(i) / 4
		ch.Ticks = append(ch.Ticks, chartTick{Y: chartBot - (chartBot-chartTop)*float64(i)/4, Label: compactCount(v)})
	}
	every := max(1, n/8)
	for i := 0; i < n; i++ {
		day := from.AddDate(0, 0, i).Format(time.DateOnly)
		g := byDay[day]
		b := dayBar{Day: day, X: chartLeft + float64(i)*slot + slot*0.15, W: slot * 0.7}
		if i%every == 0 {
			b.Label = day[5:]
		}
		y := chartBot
		for _, s := range []struct {
			class string
			v     int64
		}{{"seg-input", g.InputTokens}, {"seg-cache-read", g.CacheReadTokens}, {"seg-cache-write", g.CacheWriteTokens}, {"seg-output", g.OutputTokens}} {
			if s.v <= 0 || scale == 0 {
				continue
			}
			h := (chartBot - chartTop) * float64(s.v) / float64(scale)
			y -= h
			b.Segs = append(b.Segs, barSeg{Class: s.class, Y: y, H: h})
		}
		b.Title = fmt.Sprintf("%s: %d tokens (input %d, cache read %d, cache write %d, output %d), %d calls, USD %.4f",
			day, g.TotalTokens, g.InputTokens, g.CacheReadTokens, g.CacheWriteTokens, g.OutputTokens, g.Calls, g.CostUSD)
		ch.Bars = append(ch.Bars, b)
	}
	return ch
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten.
func niceCeil(v int64) int64 {
	if v <= 0 {
		return 0
	}
	p := int64(1)
	for p*10 <= v {
		p *= 10
	}
	for _, m := range []int64{1, 2, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// compactCount shows a token count as 12k, 3.4M.
func compactCount(v int64) string {
	switch {
	case v >= 1_000_000:
		return strconv.FormatFloat(float64(v)/1e6, 'f', -1, 64) + "M"
	case v >= 1_000:
		return strconv.FormatFloat(float64(v)/1e3, 'f', -1, 64) + "k"
	}
	return strconv.FormatInt(v, 10)
}

func (c *Console) usagePage(w http.ResponseWriter, r *http.Request) {
	c.renderUsage(w, r, http.StatusOK, nil)
}

func (c *Console) renderUsage(w http.ResponseWriter, r *http.Request, status int, extra map[string]any) {
	days := 30
	if n, err := strconv.Atoi(r.URL.Query().Get("days")); err == nil {
		for _, d := range usageDays {
			if n == d {
				days = n
			}
		}
	}
	to := time.Now().UTC().Truncate(24 * time.Hour)
	from := to.AddDate(0, 0, -(days - 1))
	rng := url.Values{"from": {from.Format(time.DateOnly)}, "to": {to.Format(time.DateOnly)}}
	get := func(group, order string, limit int) (wire.UsagePage, *api.Problem) {
		q := url.Values{"group_by": {group}, "limit": {strconv.Itoa(limit)}}
		for k, v := range rng {
			q[k] = v
		}
		if order != "" {
			q.Set("order", order)
		}
		var page wire.UsagePage
		p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/usage?"+q.Encode(), nil, &page)
		return page, p
	}
	perDay, p := get("day", "", 500)
	if p != nil {
		c.internal(w, r, p)
		return
	}
	sessions, p := get("session", "tokens", 10)
	if p != nil {
		c.internal(w, r, p)
		return
	}
	keys, p := get("key", "tokens", 10)
	if p != nil {
		c.internal(w, r, p)
		return
	}
	budgets, p := listAll[wire.Budget](r.Context(), c.admin, "/admin/v1/budgets")
	if p != nil {
		c.internal(w, r, p)
		return
	}
	var changes struct {
		Items []wire.BudgetChange `json:"items"`
	}
	if p := c.admin.call(r.Context(), http.MethodGet, "/admin/v1/budgets/changes?limit=10", nil, &changes); p != nil {
		c.internal(w, r, p)
		return
	}
	data := map[string]any{
		"Days": days, "DayChoices": usageDays, "From": from.Format(time.DateOnly), "To": to.Format(time.DateOnly),
		"Chart": buildChart(perDay.Items, from, to), "Totals": perDay.Totals,
		"TopSessions": sessions.Items, "TopKeys": keys.Items, "Budgets": budgets, "Changes": changes.Items,
	}
	for k, v := range extra {
		data[k] = v
	}
	c.render(w, r, status, "usage", data)
}

// budgetBack is where a budget form returns: the page it was posted from
// (a session's page, or the usage page).
func budgetBack(r *http.Request) string {
	if next := r.PostForm.Get("next"); strings.HasPrefix(next, "/sessions/") || strings.HasPrefix(next, "/usage") {
		return safeNext(next)
	}
	return "/usage"
}

// budgetSet sets a budget from the usage page's (or a session page's) form.
func (c *Console) budgetSet(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	scope, subject := f.Get("scope"), strings.TrimSpace(f.Get("subject"))
	limit, err := strconv.ParseFloat(strings.TrimSpace(f.Get("limit")), 64)
	if err != nil {
		c.renderUsage(w, r, http.StatusBadRequest, map[string]any{"Error": "The limit must be a number."})
		return
	}
	body := wire.BudgetBody{Unit: f.Get("unit"), Limit: &limit, Period: f.Get("period")}
	if p := c.admin.call(r.Context(), http.MethodPut, "/admin/v1/budgets/"+url.PathEscape(scope)+"/"+url.PathEscape(subject), body, nil); p != nil {
		c.budgetRefused(w, r, p)
		return
	}
	c.log.Info("console set budget", "scope", scope, "subject", subject)
	http.Redirect(w, r, budgetBack(r), http.StatusSeeOther)
}

// budgetChange resets or removes a budget.
func (c *Console) budgetChange(w http.ResponseWriter, r *http.Request) {
	f := r.PostForm
	path := "/admin/v1/budgets/" + url.PathEscape(f.Get("scope")) + "/" + url.PathEscape(f.Get("subject"))
	method := http.MethodDelete
	if f.Get("action") == "reset" {
		method, path = http.MethodPost, path+"/reset"
	}
	if p := c.admin.call(r.Context(), method, path, nil, nil); p != nil {
		c.budgetRefused(w, r, p)
		return
	}
	c.log.Info("console changed budget", "action", f.Get("action"), "scope", f.Get("scope"), "subject", f.Get("subject"))
	http.Redirect(w, r, budgetBack(r), http.StatusSeeOther)
}

func (c *Console) budgetRefused(w http.ResponseWriter, r *http.Request, p *api.Problem) {
	if p.Status >= 500 {
		c.internal(w, r, p)
		return
	}
	c.renderUsage(w, r, p.Status, map[string]any{"Error": problemText(p)})
}
