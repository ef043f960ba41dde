//! The HTML pages, server-rendered and usable without script: overview,
//! targets, service discovery, relabel stepping, series fate, exporters,
//! inference, configuration. Each takes the query parameters and returns
//! the page.

use super::api::{exporter_rows, now_ms, pool_name};
use super::html::{ago, chart, esc, human, num, page, url_param};
use super::server::Ctx;
use crate::status::targets::{Health, Pool};
use infertel_model::{Label, Labels, METRIC_NAME};
use infertel_relabel::{RelabelConfig, Relabeler};
use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

type Q = HashMap<String, String>;

fn refresh(q: &Q) -> Option<u64> {
    q.get("refresh").and_then(|r| r.parse::<u64>().ok()).filter(|r| *r > 0).map(|r| r.max(2))
}

fn labels_html(l: &Labels) -> String {
    let mut o = String::from("<code>");
    for (i, x) in l.iter().enumerate() {
        if i > 0 {
            o.push_str(", ");
        }
        let _ = write!(o, "{}=&quot;{}&quot;", esc(&x.name), esc(&x.value));
    }
    o.push_str("</code>");
    o
}

fn rule_text(r: &RelabelConfig) -> String {
    serde_json::to_string(r).unwrap_or_default()
}

/// `/` (and zpages' `/debug/servicez`, `/debug/pipelinez`).
pub fn overview(ctx: &Ctx, q: &Q) -> String {
    let cfg = ctx.board.config();
    let rates = ctx.board.history.rates(Duration::from_secs(60));
    let rate = |k: &str| rates.get(k).map(|v| format!("{}/s", num(*v))).unwrap_or_else(|| "–".into());
    let mut b = String::new();
    let (ready, why) = ctx.readiness.check();
    let _ = write!(
        b,
        "<p>Readiness: <span class={}>{}</span></p>",
        if ready { "up" } else { "down" },
        esc(why.trim()).replace('\n', "<br>")
    );
    let uptime = std::time::SystemTime::now().duration_since(ctx.board.started).unwrap_or_default();
    let _ = write!(
        b,
        "<p class=muted>Up {}; configuration applied {}. Rates over the last minute, sampled every {} s{}.</p>",
        human(uptime),
        ago(cfg.loaded_at),
        super::server::SAMPLE_EVERY.as_secs(),
        if rates.is_empty() { " (the first rates appear after two samples)" } else { "" }
    );
    let rows = exporter_rows(ctx);
    // `<br>dropped REASON: N/s` for each reason under `prefix` (kind/component/).
    let drops = |prefix: String| {
        let mut o = String::new();
        for (k, v) in rates.range(prefix.clone()..) {
            let Some(reason) = k.strip_prefix(&prefix) else { break };
            if *v > 0.0 {
                let _ = write!(o, "<br><span class=dropped>dropped {}: {}/s</span>", esc(reason), num(*v));
            }
        }
        o
    };
    for (name, p) in &cfg.pipelines {
        let _ = write!(b, "<h2>Pipeline <code>{}</code></h2><div class=flow>", esc(name));
        b.push_str("<div>");
        for r in &p.receivers {
            let d = drops(format!("rdrop/{r}/"));
            let _ = write!(b, "<div class=box>receiver <b>{}</b><br>in: {}{d}</div>", esc(r), rate(&format!("in/{r}")));
        }
        b.push_str("</div>");
        for pr in &p.processors {
            let _ = write!(b, "<span class=arrow>→</span><div class=box>processor <b>{}</b></div>", esc(pr));
        }
        b.push_str("<span class=arrow>→</span><div>");
        for e in &p.exporters {
            let row = rows.iter().find(|r| r.id == *e);
            let mut extra = String::new();
            if let Some(r) = row {
                let _ = write!(extra, "<br>out: {}{}", rate(&format!("out/{e}")), drops(format!("drop/{e}/")));
                if let Some(why) = &r.paused_because {
                    let _ = write!(extra, "<br><span class=down>paused</span>: {}", esc(why));
                }
            }
            let class = if row.is_some_and(|r| !r.up) { "box err" } else { "box" };
            let _ = write!(b, "<div class=\"{class}\">exporter <b>{}</b>{extra}</div>", esc(e));
        }
        b.push_str("</div></div>");
    }
    if cfg.pipelines.is_empty() {
        b.push_str("<p>No pipeline is configured.</p>");
    }
    page("Overview", "/", refresh(q), &b)
}

/// zpages' `/debug/extensionz`.
pub fn extensionz(ctx: &Ctx, q: &Q) -> String {
    let cfg = ctx.board.config();
    let mut b = String::from("<table><tr><th>Extension</th></tr>");
    for e in &cfg.extensions {
        let _ = write!(b, "<tr><td><code>{}</code></td></tr>", esc(e));
    }
    b.push_str("</table>");
    page("Extensions", "", refresh(q), &b)
}

fn filter_form(path: &str, q: &Q, states: &[&str]) -> String {
    let cur = q.get("state").map(String::as_str).unwrap_or("");
    let mut o = format!("<form method=get action=\"{path}\">State <select name=state><option value=\"\">any</option>");
    for s in states {
        let sel = if *s == cur { " selected" } else { "" };
        let _ = write!(o, "<option{sel}>{s}</option>");
    }
    let _ = write!(
        o,
        "</select> Text <input type=text name=q value=\"{}\" size=30> <button>Filter</button></form>",
        esc(q.get("q").map(String::as_str).unwrap_or(""))
    );
    o
}

/// `/targets?state=up|down|unknown&q=TEXT`.
pub fn targets(ctx: &Ctx, q: &Q) -> String {
    let pools = ctx.board.targets.pools();
    let state = q.get("state").filter(|s| !s.is_empty());
    let text = q.get("q").filter(|s| !s.is_empty());
    let mut b = filter_form("/targets", q, &["up", "down", "unknown"]);
    if pools.is_empty() {
        b.push_str("<p>No scrape job is running.</p>");
    }
    for p in &pools {
        let active = p.active();
        let up = active.iter().filter(|t| t.last().health == Health::Up).count();
        let _ = write!(
            b,
            "<h2>{} <span class=muted>({up}/{} up; receiver {})</span></h2><table><tr><th>Endpoint</th><th>State</th><th>Labels</th><th>Last scrape</th><th>Duration</th><th>Samples</th><th>Series added</th><th>Error</th></tr>",
            esc(&pool_name(&pools, p)),
            active.len(),
            esc(&p.receiver)
        );
        for t in &active {
            let l = t.last();
            if state.is_some_and(|s| s != l.health.as_str()) {
                continue;
            }
            if let Some(x) = text
                && !(t.url.contains(x.as_str())
                    || t.labels.to_string().contains(x.as_str())
                    || l.error.contains(x.as_str()))
            {
                continue;
            }
            let err = if l.error.is_empty() {
                String::new()
            } else {
                format!("<span class=down>{}</span>: {}", esc(l.reason), esc(&l.error))
            };
            let _ = write!(
                b,
                "<tr><td><code>{}</code></td><td class={}>{}</td><td>{}<details><summary>before relabeling</summary>{}</details></td><td>{}</td><td>{}</td><td>{} scraped, {} after metric relabeling</td><td>{}</td><td>{err}</td></tr>",
                esc(&t.url),
                l.health.as_str(),
                l.health.as_str(),
                labels_html(&t.labels),
                labels_html(&t.discovered),
                ago(l.at),
                human(l.duration),
                l.samples,
                l.post_relabel,
                l.series_added
            );
        }
        b.push_str("</table>");
    }
    page("Targets", "/targets", refresh(q), &b)
}

/// The rule of `rules` that dropped `labels`, if one did.
fn dropping_rule(rules: &[RelabelConfig], labels: &Labels) -> Option<(usize, String)> {
    let r = Relabeler::new(rules).ok()?;
    let last = r.steps(labels).pop()?;
    if last.output.is_some() {
        return None;
    }
    Some((last.index, rules.get(last.index).map(rule_text).unwrap_or_default()))
}

/// `/service-discovery`: per job, what discovery found, kept and dropped.
pub fn service_discovery(ctx: &Ctx, q: &Q) -> String {
    let pools = ctx.board.targets.pools();
    let mut b = String::new();
    for p in &pools {
        let active = p.active();
        let (dropped, more) = p.dropped();
        let _ = write!(
            b,
            "<h2>{} <span class=muted>({} kept, {} dropped; discovered {})</span></h2><table><tr><th>Discovered labels</th><th>Target labels, or the rule that dropped it</th></tr>",
            esc(&pool_name(&pools, p)),
            active.len(),
            dropped.len() + more,
            ago(p.discovered_at())
        );
        for t in &active {
            let _ = write!(
                b,
                "<tr><td>{}</td><td><span class=kept>kept</span> {} <a href=\"/relabel?pool={}&amp;target={}\">step through</a></td></tr>",
                labels_html(&t.discovered),
                labels_html(&t.labels),
                url_param(&pool_name(&pools, p)),
                url_param(&t.url)
            );
        }
        for d in &dropped {
            let why = match dropping_rule(&p.relabel_configs, d) {
                Some((i, r)) => format!("dropped by relabel_configs rule #{}: <code>{}</code>", i + 1, esc(&r)),
                None => "dropped".into(),
            };
            let _ = write!(b, "<tr><td>{}</td><td><span class=dropped>{why}</span></td></tr>", labels_html(d));
        }
        if more > 0 {
            let _ = write!(b, "<tr><td colspan=2>{more} more dropped targets not kept</td></tr>");
        }
        b.push_str("</table>");
    }
    if pools.is_empty() {
        b.push_str("<p>No scrape job is running.</p>");
    }
    page("Service discovery", "/service-discovery", refresh(q), &b)
}

/// A label set typed by a person: `name{a="b"}`, `{__name__="x",a="b"}` or
/// an exposition line (`name{a="b"} 12 1700000000000`).
pub fn parse_label_set(text: &str) -> Result<Labels, String> {
    let t = text.trim();
    let t = match t.rfind('}') {
        Some(i) => &t[..=i],
        None => t.split_whitespace().next().unwrap_or(""),
    };
    let sel = crate::status::trace::Selector::parse(t)?;
    let mut v: Vec<Label> = sel.equalities().ok_or("write label=\"value\" pairs only (no !=, =~, !~)")?;
    if let Some(n) = &sel.name
        && !v.iter().any(|l| &*l.name == METRIC_NAME)
    {
        v.push(Label::new(METRIC_NAME, n.as_str()));
    }
    Ok(Labels::from_vec(v))
}

fn steps_table(rules: &[RelabelConfig], input: &Labels, what: &str) -> String {
    let mut b = String::new();
    let r = match Relabeler::new(rules) {
        Ok(r) => r,
        Err(e) => return format!("<p class=down>{what}: {}</p>", esc(&e.to_string())),
    };
    if rules.is_empty() {
        let _ = write!(b, "<p>No {what}: the labels pass unchanged.</p>");
        return b;
    }
    let _ = write!(b, "<table><tr><th>#</th><th>Rule</th><th>Input</th><th>Output</th><th>Decision</th></tr>");
    let mut cur = input.clone();
    let steps = r.steps(input);
    for s in &steps {
        let (out, decision) = match &s.output {
            None => ("–".to_string(), "<span class=dropped>dropped</span>".to_string()),
            Some(o) if s.changed => (labels_html(o), "changed".to_string()),
            Some(o) => (labels_html(o), "<span class=muted>unchanged</span>".to_string()),
        };
        let _ = write!(
            b,
            "<tr><td>{}</td><td><code>{}</code></td><td>{}</td><td>{out}</td><td>{decision}</td></tr>",
            s.index + 1,
            esc(&rules.get(s.index).map(rule_text).unwrap_or_default()),
            labels_html(&cur)
        );
        if let Some(o) = &s.output {
            cur = o.clone();
        }
    }
    if steps.len() < rules.len() {
        let _ =
            write!(b, "<tr><td colspan=5 class=muted>rules {}–{} not reached</td></tr>", steps.len() + 1, rules.len());
    }
    b.push_str("</table>");
    let result = match steps.last().and_then(|s| s.output.as_ref()) {
        None if !steps.is_empty() => "<span class=dropped>dropped</span>".to_string(),
        _ => labels_html(&cur),
    };
    let _ = write!(b, "<p>Result: {result}</p>");
    b
}

fn find_pool(pools: &[Arc<Pool>], name: &str) -> Option<Arc<Pool>> {
    pools.iter().find(|p| pool_name(pools, p) == name).cloned()
}

/// `/relabel?pool=JOB&target=URL` steps `relabel_configs` for a target;
/// `&labels=...` steps `metric_relabel_configs` for a series;
/// `?exporter=ID&labels=...` steps an exporter's `write_relabel_configs`.
pub fn relabel(ctx: &Ctx, q: &Q) -> String {
    let pools = ctx.board.targets.pools();
    let cfg = ctx.board.config();
    let pool_sel = q.get("pool").cloned().unwrap_or_default();
    let text = q.get("labels").cloned().unwrap_or_default();
    let exporter = q.get("exporter").cloned().unwrap_or_default();
    let mut b =
        String::from("<form method=get action=\"/relabel\">Job <select name=pool><option value=\"\">–</option>");
    for p in &pools {
        let n = pool_name(&pools, p);
        let sel = if n == pool_sel { " selected" } else { "" };
        let _ = write!(b, "<option{sel}>{}</option>", esc(&n));
    }
    b.push_str("</select> or exporter <select name=exporter><option value=\"\">–</option>");
    for id in cfg.write_relabel.keys() {
        let sel = if *id == exporter { " selected" } else { "" };
        let _ = write!(b, "<option{sel}>{}</option>", esc(id));
    }
    let _ = write!(
        b,
        "</select><br>Series (label set or exposition line): <input type=text name=labels size=80 value=\"{}\"> <button>Step through</button></form>",
        esc(&text)
    );
    if !exporter.is_empty() {
        match (cfg.write_relabel.get(&exporter), parse_label_set(&text)) {
            (None, _) => {
                let _ = write!(b, "<p>Exporter {} has no write_relabel_configs.</p>", esc(&exporter));
            }
            (_, Err(e)) if !text.is_empty() => {
                let _ = write!(b, "<p class=down>{}</p>", esc(&e));
            }
            (Some(rules), Ok(l)) if !text.is_empty() => {
                let _ = write!(b, "<h2>write_relabel_configs of {}</h2>", esc(&exporter));
                b.push_str(&steps_table(rules, &l, "write_relabel_configs"));
            }
            _ => b.push_str("<p>Type a series to step through the exporter's write_relabel_configs.</p>"),
        }
        return page("Relabel", "/relabel", None, &b);
    }
    let Some(pool) = find_pool(&pools, &pool_sel) else {
        b.push_str(
            "<p>Pick a job, then a target (its relabel_configs) or type a series (its metric_relabel_configs).</p>",
        );
        return page("Relabel", "/relabel", None, &b);
    };
    let active = pool.active();
    let target = q.get("target").and_then(|u| active.iter().find(|t| t.url == *u || t.instance() == u)).cloned();
    let _ = write!(b, "<h2>Targets of {}</h2><ul>", esc(&pool_sel));
    for t in &active {
        let _ = write!(
            b,
            "<li><a href=\"/relabel?pool={}&amp;target={}\">{}</a></li>",
            url_param(&pool_sel),
            url_param(&t.url),
            esc(&t.url)
        );
    }
    b.push_str("</ul>");
    if !text.is_empty() {
        match parse_label_set(&text) {
            Err(e) => {
                let _ = write!(b, "<p class=down>{}</p>", esc(&e));
            }
            Ok(l) => {
                // As the scrape does: the target's labels attached first.
                let input = match &target.as_ref().or(active.first()) {
                    Some(t) => Labels::from_vec(crate::receivers::prometheus::scrape::attach_target_labels(
                        l.iter().cloned().collect(),
                        &t.labels,
                        false,
                    )),
                    None => l,
                };
                b.push_str("<h2>metric_relabel_configs</h2>");
                b.push_str(&steps_table(&pool.metric_relabel_configs, &input, "metric_relabel_configs"));
            }
        }
    } else if let Some(t) = target {
        let _ = write!(b, "<h2>relabel_configs for <code>{}</code></h2>", esc(&t.url));
        b.push_str(&steps_table(&pool.relabel_configs, &t.discovered, "relabel_configs"));
    }
    page("Relabel", "/relabel", None, &b)
}

/// `/series?match=SELECTOR`: the fate of the matching series.
pub fn series(ctx: &Ctx, q: &Q) -> String {
    let m = q.get("match").cloned().unwrap_or_default();
    let mut b = format!(
        "<form method=get action=\"/series\">Series selector <input type=text name=match size=80 value=\"{}\"> <button>Trace</button></form>",
        esc(&m)
    );
    if m.trim().is_empty() {
        b.push_str("<p>Type a selector (<code>vllm:num_requests_running{model_name=\"m\"}</code>): every scrape and every exporter notes from then on what it does with the matching series, for 10 minutes after the last look.</p>");
        return page("Series", "/series", None, &b);
    }
    let trace = match ctx.board.tracer.open(&m) {
        Ok(t) => t,
        Err(e) => {
            let _ = write!(b, "<p class=down>{}</p>", esc(&e));
            return page("Series", "/series", None, &b);
        }
    };
    let fates = trace.fates();
    let intervals: Vec<Duration> =
        ctx.board.targets.pools().iter().flat_map(|p| p.active()).map(|t| t.interval).collect();
    let longest = intervals.iter().max().copied().unwrap_or_default();
    let _ = write!(b, "<p class=muted>Traced since {}.", ago(Some(trace.since)));
    if fates.is_empty() {
        let waited = std::time::SystemTime::now().duration_since(trace.since).unwrap_or_default();
        if waited > longest + Duration::from_secs(2) && !intervals.is_empty() {
            let _ = write!(
                b,
                " No target exposed a matching series in the scrapes since (longest interval {}): check the name on <a href=\"/targets\">Targets</a> and the job's relabeling.",
                human(longest)
            );
        } else {
            let _ = write!(b, " Waiting for the next scrape of each target (longest interval {}).", human(longest));
        }
    }
    if trace.overflowed() {
        let _ = write!(b, " More than {} series match: the first are shown.", crate::status::trace::MAX_SERIES);
    }
    b.push_str("</p>");
    if !fates.is_empty() {
        b.push_str("<table><tr><th>Target</th><th>Scraped as</th><th>Scrape</th><th>Forwarded as</th><th>Last value</th><th>Exporters</th></tr>");
        for f in &fates {
            let (class, scrape) = match &f.scrape {
                Some(s) if s.kept() => ("kept", s.describe()),
                Some(s) => ("dropped", s.describe()),
                None => ("muted", "made in the pipeline".into()),
            };
            let mut ex = String::new();
            for (id, e) in &f.exporters {
                let delivered = if e.delivered > 0 && e.state != crate::status::trace::ExportState::Delivered {
                    format!("; {} samples delivered, the last {}", e.delivered, ago(e.last_delivered))
                } else if e.delivered > 0 {
                    format!("; {} samples delivered", e.delivered)
                } else {
                    String::new()
                };
                let _ = write!(
                    ex,
                    "<div><b>{}</b>: <span class={}>{}</span> {} <span class=muted>{}{delivered}</span></div>",
                    esc(id),
                    e.state.as_str(),
                    e.state.as_str(),
                    esc(&e.detail),
                    ago(Some(e.at))
                );
            }
            let _ = write!(
                b,
                "<tr><td>{}</td><td><code>{}</code></td><td class={class}>{}</td><td><code>{}</code></td><td>{}</td><td>{ex}</td></tr>",
                esc(if f.target.is_empty() { "–" } else { &f.target }),
                esc(&f.scraped_as),
                esc(&scrape),
                esc(f.forwarded_as.as_deref().unwrap_or("–")),
                num(f.value)
            );
        }
        b.push_str("</table>");
    }
    page("Series", "/series", refresh(q).or(Some(5)), &b)
}

/// `/exporters`.
pub fn exporters(ctx: &Ctx, q: &Q) -> String {
    let rows = exporter_rows(ctx);
    let mut b = String::new();
    if rows.is_empty() {
        b.push_str("<p>No network exporter is configured.</p>");
    }
    for r in &rows {
        let state = if r.up {
            "<span class=up>up</span>".to_string()
        } else {
            format!("<span class=down>paused</span>: {}", esc(r.paused_because.as_deref().unwrap_or("")))
        };
        let _ = write!(b, "<h2>{}</h2><table>", esc(&r.id));
        let mut row = |k: &str, v: String| {
            let _ = write!(b, "<tr><th>{k}</th><td>{v}</td></tr>");
        };
        row("Endpoint", format!("<code>{}</code>", esc(&r.endpoint)));
        row("State", state);
        row(
            "Startup check",
            esc(r.startup.as_deref().unwrap_or("not made (startup_check: off, or infertel run not started it yet)")),
        );
        row(
            "Last response",
            match &r.last_status {
                None => "none yet".into(),
                Some((at, s, body)) => format!(
                    "<code>{}</code> {} {}",
                    esc(s),
                    ago(Some(*at)),
                    if body.is_empty() { String::new() } else { format!("<br><code>{}</code>", esc(body)) }
                ),
            },
        );
        row(
            "Queue",
            format!("{} samples, {} bytes, oldest {} s", num(r.queue_samples), num(r.queue_bytes), num(r.oldest_age_s)),
        );
        row("Held (paused senders)", num(r.held));
        row("Sent samples", num(r.sent));
        let list = |m: &std::collections::BTreeMap<String, f64>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter().map(|(k, v)| format!("{}: {}", esc(k), num(*v))).collect::<Vec<_>>().join(", ")
            }
        };
        row("Failed requests (retries), by status", list(&r.failed_requests));
        row("Dropped samples, by reason", list(&r.dropped));
        row("Duplicates (already stored)", num(r.duplicates));
        b.push_str("</table>");
    }
    page("Exporters", "/exporters", refresh(q), &b)
}

/// The derived series charted, in this order.
const CHARTED: &[&str] = &[
    "infertel_generation_tokens_per_second",
    "infertel_prompt_tokens_per_second",
    "infertel_time_to_first_token_seconds",
    "infertel_inter_token_latency_seconds",
    "infertel_e2e_latency_seconds",
    "infertel_kv_cache_usage_ratio",
    "infertel_prefix_cache_hit_ratio",
    "infertel_tokens_per_watt",
];
const MAX_CHARTS: usize = 24;

/// `/inference`: per inference processor, the charts, verdicts and
/// recommendations `report` would print.
pub fn inference(ctx: &Ctx, q: &Q) -> String {
    let procs = ctx.board.inference();
    let history = ctx.board.history.derived();
    let mut b = String::new();
    if procs.is_empty() {
        b.push_str("<p>No inference processor is configured.</p>");
    }
    for (id, p) in &procs {
        let r = p.report(now_ms());
        let _ = write!(b, "<h2>{} <span class=muted>(window {} s)</span></h2>", esc(id), num(r.window_seconds));
        b.push_str("<h3>SLO verdicts</h3><table><tr><th>Objective</th><th>Scope</th><th>Target</th><th>Measured</th><th>Verdict</th><th>Note</th></tr>");
        for v in &r.verdicts {
            let class = v.verdict.replace(' ', "_");
            let _ = write!(
                b,
                "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td class={class}>{}</td><td>{}</td></tr>",
                esc(&v.objective),
                esc(&v.scope),
                esc(&v.target),
                esc(&v.measured),
                esc(&v.verdict),
                esc(&v.note)
            );
        }
        b.push_str("</table><h3>Recommendations</h3>");
        if r.recommendations.is_empty() {
            b.push_str("<p>None: the numbers support no change.</p>");
        } else {
            b.push_str("<ul>");
            for x in &r.recommendations {
                let ev: Vec<String> = x.evidence.iter().map(|e| format!("{} = {}", e.metric, num(e.value))).collect();
                let _ = write!(
                    b,
                    "<li><b>{}</b>: {} <span class=muted>({})</span></li>",
                    esc(&x.id),
                    esc(&x.text),
                    esc(&ev.join("; "))
                );
            }
            b.push_str("</ul>");
        }
        b.push_str("<h3>Charts</h3><div class=charts>");
        let mut n = 0;
        for name in CHARTED {
            for (k, pts) in history.iter().filter(|(k, _)| k.processor == *id && k.name == *name) {
                if n >= MAX_CHARTS {
                    break;
                }
                // Latency quantiles: the p95 only, to keep the page small.
                if k.labels.contains("quantile=") && !k.labels.contains("quantile=0.95") {
                    continue;
                }
                n += 1;
                let title = format!("{} {} {}", k.target, name.trim_start_matches("infertel_"), k.labels);
                b.push_str(&chart(title.trim(), pts));
            }
        }
        if n == 0 {
            b.push_str("<p>No derived values yet: they appear after the processor's first evaluations.</p>");
        }
        b.push_str("</div><h3>Instances</h3>");
        for i in &r.instances {
            let _ = write!(
                b,
                "<details><summary>{}/{} ({} engines)</summary><table>",
                esc(&i.job),
                esc(&i.instance),
                i.engines
            );
            for (k, v) in &i.measurements {
                let _ = write!(b, "<tr><td>{}</td><td>{}</td></tr>", esc(k), num(*v));
            }
            b.push_str("</table></details>");
        }
        for note in &r.notes {
            let _ = write!(b, "<p class=muted>{}</p>", esc(note));
        }
    }
    page("Inference", "/inference", refresh(q), &b)
}

/// `/config`: the effective configuration, secrets redacted.
pub fn config(ctx: &Ctx, q: &Q) -> String {
    let cfg = ctx.board.config();
    let b = format!(
        "<p class=muted>As parsed, every default filled in; secrets shown as &lt;redacted&gt;. Applied {}.</p><pre>{}</pre>",
        ago(cfg.loaded_at),
        esc(&cfg.effective)
    );
    page("Configuration", "/config", refresh(q), &b)
}
