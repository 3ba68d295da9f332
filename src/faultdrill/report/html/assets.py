"""What the HTML report carries inside itself: its style sheet, its one small script, and
the Content-Security-Policy that forbids loading anything else (no network needed)."""

from __future__ import annotations

__all__ = ["CSP", "CSS", "SCRIPT"]

CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; script-src 'unsafe-inline'; "
    "img-src data:; base-uri 'none'; form-action 'none'"
)

CSS = """
:root{--fg:#111827;--mut:#4b5563;--line:#e5e7eb;--pass:#047857;--fail:#b91c1c;--retest:#b45309;
--bg-pass:#d1fae5;--bg-fail:#fee2e2;--bg-retest:#fef3c7}
*{box-sizing:border-box}
body{font-family:system-ui,-apple-system,"Segoe UI","Noto Sans","Noto Sans CJK SC","PingFang SC",
"Microsoft YaHei","WenQuanYi Micro Hei",sans-serif;color:var(--fg);margin:0;line-height:1.45;background:#fff}
main{max-width:1180px;margin:0 auto;padding:16px 24px 60px}
header.top{border-bottom:3px solid var(--fg);padding-bottom:8px;margin-bottom:12px}
h1{font-size:1.55em;margin:.2em 0}h2{font-size:1.25em;margin:1.6em 0 .5em;border-bottom:1px solid var(--line)}
h3{font-size:1.1em;margin:0 0 .4em}h4{font-size:1em;margin:1em 0 .3em}
.sub{color:var(--mut);font-size:.9em}
.banner{display:inline-block;padding:4px 12px;border-radius:4px;font-weight:700;margin-top:6px}
.banner.ok{background:var(--bg-pass);color:var(--pass)}.banner.notok{background:var(--bg-fail);color:var(--fail)}
nav.toc{font-size:.9em;margin:8px 0}nav.toc a{margin-right:14px}
table{border-collapse:collapse;width:100%;margin:6px 0 10px;font-size:.92em}
th,td{border:1px solid var(--line);padding:4px 7px;text-align:left;vertical-align:top}
th{background:#f3f4f6;font-weight:600}
table.row th{width:15%;white-space:nowrap}
table.levels td:first-child,table.levels td:nth-child(2){white-space:nowrap}
table.layer td:first-child,table.dossier td:first-child{width:22%}
.part{margin:10px 0}.warning{color:var(--fail);font-weight:600}
p.level-line{font-size:1.02em}
.v{font-weight:700;padding:1px 7px;border-radius:3px;white-space:nowrap}
.v.pass{background:var(--bg-pass);color:var(--pass)}.v.fail{background:var(--bg-fail);color:var(--fail)}
.v.retest,.v.not-run{background:var(--bg-retest);color:var(--retest)}
article.item{border:1px solid var(--line);border-left:6px solid #9ca3af;border-radius:4px;padding:12px 14px;margin:14px 0}
article.item.pass{border-left-color:var(--pass)}article.item.fail{border-left-color:var(--fail)}
article.item.retest{border-left-color:var(--retest)}
ol.questions{margin:4px 0 8px;padding-left:1.6em}ol.questions li{margin:2px 0}
ol.questions .qlabel{font-weight:600}
figure{margin:8px 0 12px}figcaption{font-size:.85em;color:var(--mut)}
svg{display:block;max-width:100%;height:auto;font-size:11px}
svg .lane-label{font-size:11px;fill:#334155}svg .tick{font-size:10px;fill:#475569}
svg .axis{font-size:11px;fill:#334155}svg .qnum{font-size:10px;fill:#fff;font-weight:700}
svg .in-bar{font-size:9.5px;fill:#1f2937}svg .in-bar.light{fill:#fff}
svg .note{font-size:10.5px;fill:#111827}svg .note.red{fill:#b91c1c}svg .legend{font-size:10.5px;fill:#1f2937}
code,pre{font-family:ui-monospace,SFMono-Regular,Menlo,Consolas,monospace;font-size:.88em}
pre{background:#f8fafc;border:1px solid var(--line);padding:6px;overflow:auto;max-height:320px}
details{margin:4px 0}summary{cursor:pointer;color:#1d4ed8}
td.sign{height:2.4em;min-width:12em}
.note{color:var(--mut);font-size:.9em}
footer{margin-top:40px;color:var(--mut);font-size:.8em;border-top:1px solid var(--line);padding-top:6px}
@media print{nav.toc,details>summary{display:none}details{display:block}article.item{break-inside:avoid}}
"""

SCRIPT = """
(function(){
  document.querySelectorAll('tr[data-scenario]').forEach(function(tr){
    tr.style.cursor='pointer';
    tr.addEventListener('click',function(){
      var el=document.getElementById('item-'+tr.getAttribute('data-scenario'));
      if(el){el.scrollIntoView({behavior:'smooth'});}
    });
  });
  document.body.setAttribute('data-ready','1');
})();
"""
