"""Translations of the human reports (Markdown, HTML, runbook): English and Chinese.

``report.json`` stays language-neutral; only the renderers translate. The Chinese wording
follows the methodology the tool implements (``shared/seed``): 前置条件、注入动作、预期状态、
实际证据、恢复动作、结论; 自动恢复 / 需人工确认 / 需人工重启 / 无法恢复; 进度、资源、结果三类
证据; 补测; 已验证范围与待验证列表; 任务/数据/资源/恢复/责任档案; 故障注入人、观察人、恢复操作人、
结论签收人.

Messages a check writes into ``report.json`` (its findings) are data, kept as recorded
(English); each check's *name* and each fixed label is translated here.

Usage::

    t = translator("zh")
    t("verdict.pass")                      # "通过"
    t("summary.scenarios", n=3, p=2, f=1, r=0)

A key missing from a language falls back to English; a key missing from the catalogue is a
programming error (``KeyError``), caught by the tests, which also check that both languages
use the same placeholders.
"""

from __future__ import annotations

from typing import Any

from faultdrill.errors import DrillError

__all__ = ["CATALOG", "LANGS", "Translator", "check_lang", "translator"]

LANGS = ("en", "zh")

# key -> (English, Chinese)
CATALOG: dict[str, tuple[str, str]] = {
    # verdicts, classes, evidence kinds
    "verdict.pass": ("PASS", "通过"),
    "verdict.fail": ("FAIL", "未通过"),
    "verdict.retest": ("RETEST", "补测"),
    "verdict.not-run": ("NOT RUN", "未执行"),
    "class.automatic": ("automatic", "自动恢复"),
    "class.manual-confirmation": ("manual confirmation", "需人工确认"),
    "class.manual-restart": ("manual restart", "需人工重启"),
    "class.unrecoverable": ("unrecoverable", "无法恢复"),
    "class.automatic.why": (
        "the platform recovered the job by itself from valid progress",
        "平台自行从有效进度恢复了任务",
    ),
    "class.manual-confirmation.why": (
        "the job recovered, but a person must confirm (stale replicas, leftovers, "
        "unexplained evidence, or the plan requires it)",
        "任务已恢复，但需要人员确认（旧副本残留、资源未释放、证据无法解释，或计划要求确认）",
    ),
    "class.manual-restart.why": (
        "the job continued only after the recovery operator resubmitted it",
        "恢复操作人重新提交后任务才继续",
    ),
    "class.unrecoverable.why": (
        "the job did not come back, or came back but not from valid progress with valid results",
        "任务未恢复，或虽重新运行但没有从有效进度继续并保持结果有效",
    ),
    "ev.progress": ("progress", "进度证据"),
    "ev.resources": ("resources", "资源证据"),
    "ev.results": ("results", "结果证据"),
    "ev.expectation": ("expectation", "预期核对"),
    "yes": ("yes", "是"),
    "no": ("no", "否"),
    "na": ("n/a", "无"),
    "none": ("none", "无"),
    "ok": ("OK", "成立"),
    "not-ok": ("NOT OK", "不成立"),
    "seconds": ("{v:.2f} s", "{v:.2f} 秒"),
    # the scenario row
    "row.preconditions": ("Preconditions", "前置条件"),
    "row.injection": ("Injection", "注入动作"),
    "row.expected": ("Expected state", "预期状态"),
    "row.evidence": ("Actual evidence", "实际证据"),
    "row.recovery": ("Recovery action", "恢复动作"),
    "row.conclusion": ("Conclusion", "结论"),
    "row.outcome": ("Job outcome", "任务结局"),
    "pre.baseline": ("baseline recorded and passed", "基线已记录并通过"),
    "pre.none": ("none beyond the baseline", "除基线外无其他条件"),
    "inj.text": ("`{kind}` on {target}, {trigger}", "`{kind}`，目标 {target}，触发：{trigger}"),
    "inj.text.plain": ("{kind} on {target}, {trigger}", "{kind}，目标 {target}，触发：{trigger}"),
    "exp.text": (
        "job {job}, recovery {recovery}, resume from {resume}",
        "任务{job}，恢复方式：{recovery}，继续位置：{resume}",
    ),
    "exp.job.completes": ("completes", "完成"),
    "exp.job.fails": ("fails", "失败"),
    "exp.resume.latest-valid": ("the latest valid checkpoint", "最新有效检查点"),
    "exp.resume.previous-valid": ("the previous valid checkpoint", "上一个有效检查点"),
    "exp.resume.scratch": ("scratch", "从头开始"),
    "exp.resume.no-restart": ("(no restart expected)", "（预期不重启）"),
    "action.none": ("none: the platform acted alone", "无：平台自行处理"),
    "action.by": ("{action} by {operator}", "{operator} 执行 {action}"),
    "conclusion.text": (
        "{verdict}; recovery class {cls}: {why}",
        "{verdict}；恢复类别：{cls}（{why}）",
    ),
    "conclusion.cls": ("recovery class {cls}: {why}", "恢复类别：{cls}（{why}）"),
    "exp.control": (
        "the known-bad workload is caught: check {check} fails it",
        "已知缺陷被识别：检查 {check} 判定其未通过",
    ),
    "ctl.caught": ("CAUGHT", "已识别"),
    "ctl.missed": ("MISSED", "未识别"),
    "ctl.unproven": ("NOT PROVEN (retest)", "未证实（补测）"),
    "not_as_planned": (
        "Not run as planned: {why}; this proves nothing either way (retest)",
        "未按计划执行：{why}；无法据此下结论（补测）",
    ),
    "ctl.line": (
        "Negative control: {caught} by `{check}` (workload mutation: `{mutation}`); verdict {verdict}",
        "阴性对照：{caught}，应由 `{check}` 识别（工作负载缺陷：`{mutation}`）；判定 {verdict}",
    ),
    "ctl.line.plain": (
        "Negative control: {caught} by {check} (workload mutation: {mutation}); verdict {verdict}",
        "阴性对照：{caught}，应由 {check} 识别（工作负载缺陷：{mutation}）；判定 {verdict}",
    ),
    "verdict.line": (
        "Verdict: {verdict} · recovery class: {cls} ({why})",
        "判定：{verdict} · 恢复类别：{cls}（{why}）",
    ),
    # the four questions
    "q.title": ("The four questions", "时间线四个问题"),
    "q.1": ("Worker deemed lost", "平台何时认定原Worker不可用"),
    "q.2": ("Old replica stopped", "旧副本何时停止"),
    "q.3": ("New replicas ready", "新资源何时完成准备"),
    "q.4": ("Training continued from", "任务从哪个检查点和数据位置继续"),
    "q.short.1": ("lost", "认定不可用"),
    "q.short.2": ("old stopped", "旧副本停止"),
    "q.short.3": ("new ready", "新副本就绪"),
    "q.short.4": ("continued", "继续训练"),
    "q.by": ("by {by}", "依据：{by}"),
    "q.first_step": ("first new step {when}", "第一个新步 {when}"),
    "q.note": ("Note: {note}", "说明：{note}"),
    "when.none": ("not observed", "未观测到"),
    "when.rel": ("{wall} (+{rel:.2f} s after injection)", "{wall}（注入后 +{rel:.2f} 秒）"),
    "resumed.none": ("no restart observed", "未观测到重启"),
    "resumed.scratch": (
        "from scratch (step 0, data position 0)",
        "从头开始（第 0 步，数据位置 0）",
    ),
    "resumed.ckpt": (
        "checkpoint `{ckpt}`, step {step}, data position {pos} ({ver})",
        "检查点 `{ckpt}`，第 {step} 步，数据位置 {pos}（{ver}）",
    ),
    "resumed.ckpt.plain": (
        "checkpoint {ckpt}, step {step}, data position {pos} ({ver})",
        "检查点 {ckpt}，第 {step} 步，数据位置 {pos}（{ver}）",
    ),
    "ver.true": ("verified", "已校验"),
    "ver.false": ("NOT verified", "未校验"),
    "ver.none": ("verification unknown", "校验情况未知"),
    "times.line": (
        "Observed: detection {detect}, new replicas ready {ready}, first new step {recover} "
        "after injection; recomputed steps: {recomputed}.",
        "观测值：注入后 {detect} 认定故障，{ready} 新副本就绪，{recover} 出现第一个新步；"
        "重算步数：{recomputed}。",
    ),
    "evidence.title": ("Evidence", "证据"),
    "cond.title": ("Conditions of these observations", "观测条件"),
    "cond.line": (
        "platform {platform} (isolation {isolation}), {nodes} node(s) x {ppn} process(es), "
        "world size(s) {ws}, checkpoint every {every} steps, max restarts {restarts}, timeouts "
        "{timeouts}, process sampling {hz} Hz; host {host} ({cpus} CPUs, kernel {kernel}), "
        "python {python}, torch {torch}.",
        "平台 {platform}（隔离方式 {isolation}），{nodes} 个节点 × 每节点 {ppn} 个进程，"
        "world size {ws}，每 {every} 步一个检查点，最多重启 {restarts} 次，超时设置 {timeouts}，"
        "进程采样 {hz} Hz；主机 {host}（{cpus} 个 CPU，内核 {kernel}），python {python}，"
        "torch {torch}。",
    ),
    "cond.note": (
        "Times are single observations under these conditions, not a service level.",
        "时间仅是上述条件下的单次观测样本，不构成SLA或性能承诺。",
    ),
    # markdown / html page
    "title": ("Fault drill report: {task}", "故障演练报告：{task}"),
    "subtitle": (
        "faultdrill {version} · plan {digest}",
        "faultdrill {version} · 计划摘要 {digest}",
    ),
    "summary.title": ("Summary", "结论摘要"),
    "summary.scenarios": (
        "Scenarios: {n} run — {p} pass, {f} fail, {r} retest.",
        "场景：共执行 {n} 个 — {p} 个通过，{f} 个未通过，{r} 个需补测。",
    ),
    "summary.controls": (
        "Negative controls: {c} of {n} caught by the check their bug violates.",
        "阴性对照：{n} 个中有 {c} 个被其缺陷所违反的检查识别。",
    ),
    "summary.baseline": (
        "Baseline: {verdict}, {steps} steps, final model `{digest}`, world size {ws}.",
        "基线：{verdict}，{steps} 步，最终模型 `{digest}`，world size {ws}。",
    ),
    "summary.baseline.plain": (
        "Baseline: {verdict}, {steps} steps, final model {digest}, world size {ws}.",
        "基线：{verdict}，{steps} 步，最终模型 {digest}，world size {ws}。",
    ),
    "summary.overall": (
        "Overall: {ok} — pass means recovery from valid progress was proven by progress, "
        "resource and result evidence; anything unexplained is retest, never pass.",
        "总体：{ok} — 通过表示进度、资源、结果三类证据共同证明任务从有效进度恢复；"
        "任何无法解释的证据都标记为补测，绝不算通过。",
    ),
    "col.scenario": ("scenario", "场景"),
    "col.round": ("round", "轮次"),
    "col.fault": ("fault", "故障"),
    "col.verdict": ("verdict", "判定"),
    "col.class": ("recovery class", "恢复类别"),
    "col.detect": ("detect", "发现耗时"),
    "col.ready": ("new replicas ready", "新副本就绪"),
    "col.recover": ("first new step", "第一个新步"),
    "col.recomputed": ("recomputed", "重算步数"),
    "col.resume": ("resumed from", "继续位置"),
    "col.control": ("negative control", "阴性对照"),
    "col.bug": ("bug", "缺陷"),
    "col.expected_check": ("expected check", "应触发的检查"),
    "col.caught": ("caught", "已识别"),
    "col.check": ("check", "检查项"),
    "col.message": ("finding", "发现"),
    "col.role": ("role", "角色"),
    "col.name": ("name", "姓名"),
    "col.signature": ("signature", "签字"),
    "col.date": ("date", "日期"),
    "col.step": ("step", "步骤"),
    "col.who": ("who", "执行人"),
    "col.permission": ("permission", "所需权限"),
    "col.time": ("time observed", "观测耗时"),
    "col.item": ("item", "项目"),
    "col.value": ("value", "内容"),
    "col.dimension": ("dimension", "维度"),
    "col.verified": ("verified in this run", "本次已验证"),
    "col.to_verify": ("to be verified", "待验证"),
    "col.measured": ("measured time", "测量的时间"),
    "col.conditions": ("conditions", "条件"),
    "skipped.reason": ("{reason}", "{reason}"),
    "controls.title": ("Negative controls", "阴性对照"),
    "controls.intro": (
        "Each control runs a known-bad workload under the same fault; the named check must "
        "fail it. A control that is not caught means the drill cannot be trusted to see that "
        "bug.",
        "每个阴性对照在同一故障下运行一个已知有缺陷的工作负载，指定的检查必须判其未通过。"
        "未被识别的对照说明本次演练无法可靠发现这类缺陷。",
    ),
    "baseline.title": ("Baseline (frozen before any fault)", "基线（故障注入前冻结）"),
    "baseline.task": (
        "Task: `{id}`, config version `{cfg}`, code `{code}`",
        "任务：`{id}`，配置版本 `{cfg}`，代码/运行环境 `{code}`",
    ),
    "baseline.data": (
        "Data: snapshot `{snap}` {digest}, read position {pos}",
        "数据：快照 `{snap}` {digest}，读取位置 {pos}",
    ),
    "baseline.resources": ("Resources: {topology}", "资源：{topology}"),
    "baseline.ckpt": (
        "Checkpoint policy: every {every} steps, keep {keep}",
        "检查点策略：每 {every} 步保存，保留 {keep} 个",
    ),
    "baseline.seeds": ("Seeds: {seeds}", "随机种子：{seeds}"),
    "baseline.window": ("Observation window: {window}", "观察窗口：{window}"),
    "baseline.resp": (
        "Responsibility: injector {injector}, observer {observer}, recovery operator "
        "{operator}, signer {signer}",
        "责任：故障注入人 {injector}，观察人 {observer}，恢复操作人 {operator}，"
        "结论签收人 {signer}",
    ),
    "baseline.selfcheck": ("Baseline {cat} self-check: {verdict}", "基线{cat}自检：{verdict}"),
    "scenarios.title": ("Scenarios", "场景"),
    "scope.title": ("Verified scope and what stays to be verified", "已验证范围与待验证列表"),
    "scope.verified": (
        "Verified: the scenarios above, on platform `{platform}` with {nodes} node(s) x {ppn} "
        "process(es), entrypoint `{entry}`.",
        "已验证：上述场景，平台 `{platform}`，{nodes} 个节点 × 每节点 {ppn} 个进程，"
        "入口 `{entry}`。",
    ),
    "scope.to_verify": (
        "To be verified: every other model, framework version, world size, network, storage "
        "and node combination; fault kinds not in this plan.",
        "待验证：其他所有模型、框架版本、world size、网络、存储和节点组合；本计划未包含的故障类型。",
    ),
    "signoff.title": ("Sign-off", "签收"),
    "role.injector": ("Injector", "故障注入人"),
    "role.observer": ("Observer", "观察人"),
    "role.recovery_operator": ("Recovery operator", "恢复操作人"),
    "role.signer": ("Signer", "结论签收人"),
    "role.replay_operator": ("Replay operator", "复演操作人"),
    "signoff.line": ("{role}: {name} ____________", "{role}：{name} ____________"),
    # html-only sections
    "lang.name": ("English", "中文"),
    "html.contents": ("Contents", "目录"),
    "html.summary_table": ("Verdicts", "判定一览"),
    "html.timeline": ("Timeline", "时间线"),
    "html.timeline.note": (
        "One clock for every event (seconds since the fault was injected). Shaded red: "
        "injection window. Numbered lines: the four questions. Rank lanes: process lifetime "
        "(light) and training steps (dark, first-last step), one colour per incarnation. "
        "▲ checkpoint saved, ▼ checkpoint loaded, ✕ the platform deemed a replica or node "
        "lost, • rendezvous / worker group started or finished. Hover for details.",
        "所有事件使用同一时钟（以故障注入时刻为零点的秒数）。红色阴影：注入窗口。编号竖线：四个问题。"
        "rank 泳道：进程存活期（浅色）与训练步（深色，标注首末步），每代副本一种颜色。"
        "▲ 检查点写入，▼ 检查点加载，✕ 平台认定副本或节点不可用，• 汇合/worker 组启动或结束。"
        "鼠标悬停可查看详情。",
    ),
    "html.timeline.missing": (
        "Timeline not available: the item's event files are not in this directory.",
        "无法绘制时间线：该项目的事件文件不在此目录中。",
    ),
    "html.loss": ("Loss: baseline vs drill", "损失曲线：基线与演练对比"),
    "html.loss.note": (
        "Mean loss over ranks per step. Grey: fault-free baseline; colours: incarnations of "
        "the drill; dashed line: the resume point.",
        "每步各 rank 的平均损失。灰色：无故障基线；彩色：演练中的各代副本；虚线：继续训练的位置。",
    ),
    "html.loss.missing": (
        "Loss curve not available: step events missing.",
        "无法绘制损失曲线：缺少训练步事件。",
    ),
    "html.draw.error": (
        "{what} could not be drawn ({error}); the evidence above is unaffected.",
        "无法绘制{what}（{error}）；上面的证据不受影响。",
    ),
    "html.resources": ("Resource evidence", "资源证据"),
    "html.stale.none": (
        "No stale replica found: every process of an old incarnation was gone before the new "
        "one made progress.",
        "未发现旧副本残留：新一代副本取得进展之前，旧一代的所有进程均已退出。",
    ),
    "html.stale.found": ("Stale replicas or leftovers found:", "发现旧副本残留或未释放资源："),
    "html.stale.unknown": (
        "Resource evidence is incomplete (retest):",
        "资源证据不完整（需补测）：",
    ),
    "html.procs": ("Processes seen by the sampler", "采样到的进程"),
    "html.more": ("Additional recorded data", "其他记录数据"),
    "html.dossiers": ("Baseline dossiers", "基线档案"),
    "dossier.task": ("Task dossier", "任务档案"),
    "dossier.data": ("Data dossier", "数据档案"),
    "dossier.resources": ("Resource dossier", "资源档案"),
    "dossier.recovery": ("Recovery dossier", "恢复档案"),
    "dossier.responsibility": ("Responsibility dossier", "责任档案"),
    "dossier.environment": ("Environment", "运行环境"),
    "dossier.observation": ("Observation", "观测设置"),
    "html.manual": ("Manual dependencies", "人工依赖"),
    "html.manual.intro": (
        "Every step a person took or must take, with the permission it needs and the time "
        "observed. Recovery that only the original implementer can perform is not a stable "
        "hand-over.",
        "列出人员已执行或必须执行的每个步骤、所需权限与观测耗时。只有原实施人员能完成的恢复，不具备稳定交接条件。",
    ),
    "html.manual.none": (
        "No manual step was needed in the scenarios of this run.",
        "本次运行的场景没有需要人工处理的步骤。",
    ),
    "manual.resubmit": (
        "resubmit the job ({runbook})",
        "重新提交任务（{runbook}）",
    ),
    "manual.confirm": (
        "confirm the recovery before the job may continue ({why})",
        "在任务继续前确认恢复（{why}）",
    ),
    "manual.confirm.plan": ("required by the plan", "计划要求"),
    "manual.drill": (
        "run the drill: start the job, inject the fault, observe",
        "执行演练：启动任务、注入故障、观察",
    ),
    "perm.root": (
        "root on the hosts (process signals, cgroups{extra})",
        "主机 root 权限（进程信号、cgroup{extra}）",
    ),
    "perm.user": (
        "the job owner's account (signals to its own processes)",
        "任务所属账号（向自身进程发送信号）",
    ),
    "perm.operator": (
        "permission to submit and stop the job on the platform",
        "在平台上提交与停止任务的权限",
    ),
    "html.conditions": ("Conditions of every measured time", "所有测量时间的条件"),
    "html.attachments": ("Attachments", "附件"),
    "html.replay": ("Replay", "复演"),
    "replay.line": (
        "Replayed by {operator} from bundle {bundle} (original operators: {original}).",
        "由 {operator} 根据证据包 {bundle} 复演（原操作人员：{original}）。",
    ),
    "replay.match": ("outcome matches the original", "结果与原始演练一致"),
    "replay.mismatch": ("outcome differs from the original", "结果与原始演练不一致"),
    "html.footer": (
        "Generated by faultdrill {version} from report.json and the recorded events; "
        "self-contained, no network access needed.",
        "由 faultdrill {version} 根据 report.json 与记录的事件生成；单文件，无需网络访问。",
    ),
    # timeline lanes
    "lane.job": ("job state", "任务状态"),
    "lane.node": ("node {node}", "节点 {node}"),
    "lane.rank": ("rank {rank}", "rank {rank}"),
    "lane.ckpt": ("checkpoints", "检查点"),
    "lane.net": ("network", "网络"),
    "lane.net.node": ("network {node}", "网络 {node}"),
    "lane.spare": ("spare", "备用"),
    "tl.net.rate": ("traffic, max {v:.0f} KiB/s", "流量，峰值 {v:.0f} KiB/s"),
    "tl.net.silent": ("no answer from {peers}", "{peers} 无应答"),
    "tl.net.rtt": ("probe round trip, max {v:.2f} ms", "探测往返时延，峰值 {v:.2f} 毫秒"),
    "lane.faults": ("faults", "故障"),
    "tl.axis": ("seconds since injection", "距故障注入的秒数"),
    "tl.axis.start": ("seconds since start", "距开始的秒数"),
    "tl.inc": ("incarnation {inc}", "第 {inc} 代"),
    "tl.saved": ("saved {id} (step {step})", "写入 {id}（第 {step} 步）"),
    "tl.loaded": ("loaded {id} (step {step})", "加载 {id}（第 {step} 步）"),
    "tl.injection": ("injection: {what}", "注入：{what}"),
    "loss.axis.x": ("step", "步"),
    "loss.axis.y": ("loss", "损失"),
    "loss.baseline": ("baseline", "基线"),
    "loss.resume": ("resumed from {ckpt} (step {step})", "从 {ckpt} 继续（第 {step} 步）"),
    "loss.injected": ("fault at step {step}", "第 {step} 步注入故障"),
    # scope table
    "scope.dim.model": ("model / code", "模型与代码"),
    "scope.dim.framework": ("framework", "框架"),
    "scope.dim.network": ("network", "网络"),
    "scope.dim.storage": ("storage", "存储"),
    "scope.dim.nodes": ("nodes / world size", "节点与规模"),
    "scope.dim.platform": ("platform", "平台"),
    "scope.dim.faults": ("fault kinds", "故障类型"),
    "scope.dim.scenarios": ("scenarios", "场景"),
    "scope.v.model": ("{entry} ({code}, config {cfg})", "{entry}（{code}，配置 {cfg}）"),
    "scope.tv.model": (
        "any other model, training script or config version",
        "其他任何模型、训练脚本或配置版本",
    ),
    "scope.v.framework": (
        "torch {torch}, backend {backend}, python {python}",
        "torch {torch}，后端 {backend}，python {python}",
    ),
    "scope.tv.framework": (
        "other torch versions; other backends (e.g. NCCL on GPUs); other launchers",
        "其他 torch 版本；其他通信后端（如 GPU 上的 NCCL）；其他启动器",
    ),
    "scope.v.network.none": ("loopback on one host", "单主机回环网络"),
    "scope.v.network.netns": (
        "veth pairs between network namespaces on one host",
        "单主机内网络命名空间之间的 veth 链路",
    ),
    "scope.tv.network": (
        "a real multi-host fabric (Ethernet/RDMA/InfiniBand), switches, real link latency",
        "真实多主机网络（以太网/RDMA/InfiniBand）、交换机、真实链路时延",
    ),
    "scope.v.storage": (
        "local filesystem checkpoint directory ({dir})",
        "本地文件系统检查点目录（{dir}）",
    ),
    "scope.tv.storage": (
        "shared or remote storage (NFS, parallel FS, object store) and its failure modes",
        "共享或远程存储（NFS、并行文件系统、对象存储）及其故障模式",
    ),
    "scope.v.nodes": (
        "{nodes} node(s) x {ppn} process(es); world size(s) observed {ws}; {spares} spare(s)",
        "{nodes} 个节点 × 每节点 {ppn} 个进程；观测到的 world size {ws}；备用节点 {spares} 个",
    ),
    "scope.tv.nodes": (
        "other node counts and world sizes; real separate hosts; devices other than {devices}",
        "其他节点数与 world size；真实的独立主机；{devices} 以外的设备",
    ),
    "scope.tv.spares": (
        "node replacement from spare nodes (no spare in this plan)",
        "使用备用节点替换故障节点（本计划未配置备用节点）",
    ),
    "scope.v.platform": (
        "{platform} (isolation {isolation})",
        "{platform}（隔离方式 {isolation}）",
    ),
    "scope.tv.platform": (
        "other schedulers (Slurm, Ray Train, Kubernetes)",
        "其他调度平台（Slurm、Ray Train、Kubernetes）",
    ),
    "scope.v.faults": ("{kinds}", "{kinds}"),
    "scope.tv.faults": ("fault kinds not in this plan{others}", "本计划未包含的故障类型{others}"),
    "scope.v.scenarios": ("{ids}", "{ids}"),
    "scope.tv.scenarios": ("not run in this run: {ids}", "本次未执行：{ids}"),
    "scope.tv.scenarios.none": ("every planned scenario ran", "计划中的场景均已执行"),
    "scope.tv.retest": ("scenarios to retest: {ids}", "需补测的场景：{ids}"),
    # runbook
    "rb.title": ("Recovery runbook: {task}", "恢复手册：{task}"),
    "rb.intro": (
        "For each scenario: how to reproduce the fault and the recovery exactly as recorded, "
        "what to observe, and when to stop. Written so that an engineer who did not run the "
        "drill can follow it alone. Recorded values (pids, ports, paths) are from the original "
        "run; look up the current ones as shown.",
        "对每个场景说明：如何按记录原样复现故障与恢复、应观察到什么、何时停止。"
        "本手册面向未参与原演练的工程师，可独立按步骤执行。记录中的 pid、端口、路径来自原始运行，"
        "请按所示方法查找当前值。",
    ),
    "rb.prereq": ("Prerequisites", "准备条件"),
    "rb.prereq.body": (
        "A Linux host with Python {python} and torch {torch} (recorded: {host}, {cpus} CPUs, "
        "kernel {kernel}); faultdrill {version} installed (`pip install -e .` in the source "
        "tree); {perm}. Unpack the bundle: `tar -xzf BUNDLE.tar.gz` and verify it first: "
        "`faultdrill bundle verify BUNDLE.tar.gz`.",
        "一台 Linux 主机，Python {python}、torch {torch}（原记录：{host}，{cpus} 个 CPU，内核 {kernel}）；"
        "已安装 faultdrill {version}（在源码目录执行 `pip install -e .`）；{perm}。"
        "先校验证据包：`faultdrill bundle verify BUNDLE.tar.gz`，再解包：`tar -xzf BUNDLE.tar.gz`。",
    ),
    "rb.auto": ("Automated replay (recommended)", "自动复演（推荐）"),
    "rb.auto.body": (
        "Runs the baseline and this scenario on the current environment, records you as the "
        "replay operator and compares the outcome with the original:",
        "在当前环境中运行基线和本场景，将你记录为复演操作人，并与原始结果比对：",
    ),
    "rb.manual": ("By hand", "手工复现"),
    "rb.step.start": (
        "Start the job: one torchrun agent per node, each in its own shell, with this "
        "environment (as recorded):",
        "启动任务：每个节点一个 torchrun agent，各在独立终端中运行，使用以下环境变量（原样记录）：",
    ),
    "rb.netns": (
        "isolation netns: each node runs in its own network namespace (created by the run; "
        "see the ledger entries under cleanup), entered with nsenter",
        "隔离方式 netns：每个节点运行在各自的网络命名空间中（由运行创建，见清理部分的台账条目），用 nsenter 进入",
    ),
    "rb.spare": (
        "spare: the platform started it only after a node was lost; do the same",
        "备用节点：平台在节点失联后才启动它；手工复现时同样处理",
    ),
    "rb.step.wait": (
        "Wait for the trigger: {trigger}. Watch progress with:",
        "等待触发条件：{trigger}。用以下命令观察进度：",
    ),
    "rb.step.find": ("Find the target ({target}) now:", "查找当前目标（{target}）："),
    "rb.step.inject": (
        "Inject the fault (recorded command; replace the pid/target with the current one):",
        "注入故障（记录的命令；请把 pid/目标替换为当前值）：",
    ),
    "rb.step.revert": ("Revert the fault (recorded):", "撤销故障（原样记录）："),
    "rb.step.recover": ("Recovery", "恢复"),
    "rb.recover.auto": (
        "None expected from a person: the platform must restart the worker group by itself.",
        "不需要人工操作：平台应自行重启 worker 组。",
    ),
    "rb.recover.resubmit": (
        "The recovery operator resubmits the job (repeat step 1 unchanged){runbook}.",
        "恢复操作人重新提交任务（不作修改地重复第 1 步）{runbook}。",
    ),
    "rb.recover.recorded": ("Recorded operator actions: {actions}", "记录的操作人动作：{actions}"),
    "rb.recover.step": (
        "`{command}` at {at} (needs: {permission})",
        "{at} 执行 `{command}`（所需权限：{permission}）",
    ),
    "rb.expect": ("Expected observations", "预期观察结果"),
    "rb.expect.plan": ("Plan: {expected}", "计划预期：{expected}"),
    "rb.expect.recorded": ("Recorded in the original run:", "原始运行记录："),
    "rb.expect.verdict": (
        "original verdict {verdict}, recovery class {cls}",
        "原始判定 {verdict}，恢复类别 {cls}",
    ),
    "rb.stop": ("Stop conditions", "停止条件"),
    "rb.stop.body": (
        "Stop the drill and revert the fault when: the scenario runs longer than {wall} s; no "
        "new training step for {noprog} s; {nonfinite}; or anything outside the target "
        "({target}) is affected.",
        "出现以下任一情况时停止演练并撤销故障：场景运行超过 {wall} 秒；连续 {noprog} 秒没有新的训练步；"
        "{nonfinite}；或影响到目标（{target}）以外的对象。",
    ),
    "rb.stop.nonfinite.on": ("a loss becomes NaN or infinite", "损失出现 NaN 或无穷大"),
    "rb.stop.nonfinite.off": (
        "(non-finite loss does not stop this drill)",
        "（非有限损失不会终止本演练）",
    ),
    "rb.cleanup": (
        "Then clean up everything recorded: `faultdrill cleanup RUN_DIR` (undoes every change "
        "in the run's ledger.jsonl), or by hand:",
        "然后清理所有记录的变更：`faultdrill cleanup RUN_DIR`（撤销该运行 ledger.jsonl 中的每项变更），或手工执行：",
    ),
    "rb.changes": (
        "Changes recorded in the ledger for this scenario:",
        "本场景在台账中记录的变更：",
    ),
    "rb.no_injection": (
        "The original run recorded no injection for this scenario (its trigger was not reached).",
        "原始运行未记录本场景的注入（未达到触发条件）。",
    ),
    "rb.controls": ("Negative controls", "阴性对照"),
    "rb.control.body": (
        "Same steps with the known-bad workload switched on ({mutation}); the check `{check}` "
        "must fail it.",
        "步骤相同，但开启已知缺陷的工作负载（{mutation}）；检查 `{check}` 必须判其未通过。",
    ),
    # diff / replay text
    "diff.title": ("Regression diff: {a} → {b}", "回归对比：{a} → {b}"),
}

# check name -> (English, Chinese) description (what it proves)
CHECK_NAMES: dict[str, tuple[str, str]] = {
    "progress.resume-point": ("resumed from the newest valid checkpoint", "从最新有效检查点继续"),
    "progress.no-restart-from-zero": ("no restart from zero", "没有从头重跑"),
    "progress.no-jump": ("no step jump", "训练步没有跳跃"),
    "progress.checkpoint-verified": ("loaded checkpoints verified", "加载的检查点经过校验"),
    "progress.sample-ledger": (
        "every committed sample consumed exactly once",
        "每个已提交样本恰好消费一次",
    ),
    "progress.completed": ("reached the planned last step", "达到计划的最后一步"),
    "resources.no-stale-replica": ("no stale replica", "没有旧副本残留"),
    "resources.no-duplicate-rank": ("never two processes for one rank", "同一 rank 不存在两个进程"),
    "resources.released-at-end": ("nothing left after the job", "任务结束后资源全部释放"),
    "resources.children-released": (
        "no child process outlived its replica past the grace",
        "子进程未在宽限期后残留",
    ),
    "resources.faults-reverted": (
        "every fault and recorded change taken back",
        "所有故障与记录的变更均已撤销",
    ),
    "progress.steps-attributed": (
        "every step came from an announced replica",
        "每个训练步都来自已登记的副本",
    ),
    "results.loss-matches-baseline": ("loss equals the baseline", "损失与基线一致"),
    "results.final-model-digest": ("final model identical to the baseline", "最终模型与基线一致"),
    "results.final-checkpoint-verifies": ("final checkpoint verifies", "最终检查点校验通过"),
    "expectation.fault-applied": ("fault injected", "故障已注入"),
    "expectation.no-stop-condition": ("no stop condition fired", "未触发停止条件"),
    "expectation.job-outcome": ("job ended as expected", "任务结局符合预期"),
    "expectation.restart": ("restart as expected", "重启情况符合预期"),
    "expectation.recovery-class": ("recovery class as expected", "恢复类别符合预期"),
    "expectation.baseline": ("baseline passed", "基线通过"),
    "timeline.integrity": ("timeline integrity", "时间线完整性"),
    "expectation.timeout-fired": ("which timeout decided the hang", "判定挂起的超时项"),
    "resources.lost-node-isolated": ("lost node isolated", "故障节点已隔离"),
    "expectation.spare-environment": ("spare node environment prepared", "备用节点环境准备就绪"),
    "progress.failed-save-not-published": (
        "a failed save was never published",
        "写入失败的检查点从未被发布",
    ),
    "progress.damaged-checkpoint-refused": (
        "a damaged checkpoint was refused",
        "损坏的检查点被拒绝加载",
    ),
    "expectation.outage-overlapped-save": (
        "the storage outage overlapped a save",
        "存储中断覆盖了检查点写入",
    ),
    "expectation.restart-during-outage": (
        "restart happened during the control-plane outage",
        "控制面异常期间完成了重启",
    ),
}


class Translator:
    """``t(key, **fields)``: the text of ``key`` in one language, formatted."""

    def __init__(self, lang: str) -> None:
        self.lang = check_lang(lang)
        self._i = LANGS.index(self.lang)

    def __call__(self, key: str, **fields: Any) -> str:
        pair = CATALOG[key]
        text = pair[self._i] or pair[0]
        return text.format(**fields) if fields else text

    def opt(self, key: str, default: Any, **fields: Any) -> str:
        """The text of ``key`` if the catalogue has it, else ``str(default)``."""
        return self(key, **fields) if key in CATALOG else str(default)

    def verdict(self, v: str | None) -> str:
        return self(f"verdict.{v}") if f"verdict.{v}" in CATALOG else str(v)

    def cls(self, c: str | None) -> str:
        return self(f"class.{c}") if f"class.{c}" in CATALOG else str(c)

    def cls_why(self, c: str | None, recorded: str | None) -> str:
        """Why this class: in English the recorded reason, else the class's explanation."""
        if self.lang == "en" or f"class.{c}.why" not in CATALOG:
            return recorded or ""
        return self(f"class.{c}.why")

    def evidence(self, cat: str) -> str:
        return self(f"ev.{cat}") if f"ev.{cat}" in CATALOG else cat

    def check_name(self, name: str) -> str:
        """A check's name with its meaning in words (unknown checks: the name alone)."""
        pair = CHECK_NAMES.get(name)
        return name if pair is None else f"{name} ({pair[self._i]})"

    def caught(self, caught: bool | None) -> str:
        """A control's outcome: caught, missed, or not proven (aborted: ``None``)."""
        return {True: self("ctl.caught"), None: self("ctl.unproven")}.get(
            caught, self("ctl.missed")
        )

    def seconds(self, v: Any) -> str:
        return self("na") if v is None else self("seconds", v=float(v))


def check_lang(lang: str) -> str:
    if lang not in LANGS:
        raise DrillError(f"--lang {lang!r} is not supported; use one of: {', '.join(LANGS)}")
    return lang


def translator(lang: str = "en") -> Translator:
    return Translator(lang)
