"""The chat: conversation list (searching titles and message text), new chat, the thread,
sending (queued while an answer works), steering, the live answer (SSE), stop, regenerate,
resuming a failed answer, editing a message, switching between a conversation's branches,
forking one, approvals.
Every view checks the tenant membership (decorator) and that the conversation is the user's
own (`access.conversation_for`: 404 otherwise); writes need the member role (viewers read).
Each view calls one service of `agents.runs`, `agents.conversations` or `agents.services`.

One URL answers a full page or, for htmx, the fragment it needs (`Vary: HX-Request`).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.core.exceptions import PermissionDenied, ValidationError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.middleware.csrf import get_token
from django.shortcuts import redirect, render
from django.utils.cache import patch_vary_headers
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from agentplatform.web.activity.verification import with_verdict
from agentplatform.web.chat import access
from agentplatform.web.chat.stream import RunStream
from agentplatform.web.chat.thread import Turn, for_display, turns_for
from agentplatform.web.edited_arguments import edited_arguments
from agents import conversations, runs, selectors, services
from agents.models import Agent, Approval, ApprovalStatus, Conversation, Crew, Run
from agents.quotas import QuotaExceeded
from tenancy.policy import Action
from tenancy.request_budgets import budget_refusal
from tenancy.resolution import tenant_member_required

PAGE = "web/chat/page.html"
SIDEBAR = "web/chat/sidebar.html"
THREAD = "web/chat/thread.html"
MAX_SEQ = 2**31 - 1
ATTACHED_WHILE_BUSY = (
    "Files go with a new turn: send them once the current answer ends (or stop it), or "
    "queue your text without them."
)


def _htmx(request: HttpRequest) -> bool:
    return bool(getattr(request, "htmx", False))


def _vary(response: HttpResponse) -> HttpResponse:
    patch_vary_headers(response, ["HX-Request"])
    return response


def _targets(request: HttpRequest) -> dict:
    return {
        "agents": list(access.usable(Agent, request.principal)),
        "crews": list(access.usable(Crew, request.principal)),
    }


def _conversations(request: HttpRequest):
    query = request.GET.get("q", "").strip()[:200]
    found = selectors.conversations_found(
        tenant=request.tenant, owner=request.user, title_part=query
    )
    return found, query


def _hits(request: HttpRequest, query: str) -> list[conversations.Hit]:
    """Messages whose words match the search (the user's own conversations only)."""
    if not query:
        return []
    return conversations.message_search(tenant=request.tenant, owner=request.user, query=query)


def _page(request: HttpRequest, conversation: Conversation | None, **extra) -> dict:
    found, query = _conversations(request)
    return {
        "conversations": found,
        "query": query,
        "hits": _hits(request, query),
        "conversation": conversation,
        "may_send": access.may_send(request.membership),
        "tenant_slug": request.tenant.slug,
        "attachment_max_bytes": settings.ATTACHMENT_MAX_BYTES,
        **extra,
    }


# -- list, new chat ----------------------------------------------------------------------
@tenant_member_required(Action.READ_DATA)
@require_GET
def index(request: HttpRequest) -> HttpResponse:
    """The user's conversations (searchable by title) and the New chat form; `?agent=` or
    `?crew=` preselects what to chat with."""
    if _htmx(request) and request.headers.get("HX-Target") == "conversation-list":
        found, query = _conversations(request)
        context = {
            "conversations": found,
            "query": query,
            "hits": _hits(request, query),
            "tenant_slug": request.tenant.slug,
        }
        return _vary(render(request, f"{SIDEBAR}#conversation_list", context))
    if request.GET.get("agent"):
        selected = f"agent:{request.GET['agent']}"
    elif request.GET.get("crew"):
        selected = f"crew:{request.GET['crew']}"
    else:
        selected = ""
    context = _page(request, None, selected=selected, **_targets(request))
    return _vary(render(request, PAGE, context))


@tenant_member_required(Action.START_RUN)
@require_POST
def new(request: HttpRequest) -> HttpResponse:
    """Start a conversation with the chosen agent or crew, and its first turn (with the
    files chosen, dropped or pasted: the `file` field) if a message came with it. A refused
    turn leaves nothing: the form comes back with the reason and the text (to the page's
    script, the reason as text)."""
    target = _target(request, request.POST.get("target", ""))
    text = request.POST.get("message", "")
    if (refusal := budget_refusal(request.principal)) is not None:
        return _new_refused(request, target, text, refusal, 429)
    try:
        chat, _ = runs.conversation_begin(
            tenant=request.tenant,
            target=target,
            owner=request.user,
            input=text,
            files=_files(request),
        )
    except QuotaExceeded as exc:
        return _new_refused(request, target, text, str(exc), 429)
    except ValidationError as exc:
        return _new_refused(request, target, text, " ".join(exc.messages), 400)
    location = chat_url(request, chat)
    if not _htmx(request):
        return redirect(location)
    response = HttpResponse("")  # (static/js/chat.js goes there)
    response["X-Chat-Location"] = location
    return _vary(response)


def _files(request: HttpRequest) -> list[tuple[str, bytes]]:
    limit = settings.ATTACHMENT_MAX_BYTES
    files = []
    for upload in request.FILES.getlist("file"):
        if upload.size > limit:
            raise ValidationError(f"{upload.name}: the file is larger than {limit:,} bytes.")
        files.append((upload.name or "", upload.read(limit + 1)))
    return files


def _new_refused(
    request: HttpRequest, target: Agent | Crew, text: str, reason: str, status: int
) -> HttpResponse:
    if _htmx(request):
        response = HttpResponse(reason, status=status, content_type="text/plain; charset=utf-8")
        return _vary(response)
    which = "agent" if isinstance(target, Agent) else "crew"
    context = _page(
        request, None, selected=f"{which}:{target.slug}", message=text, refused=reason,
        **_targets(request),
    )  # fmt: skip
    return _vary(render(request, PAGE, context, status=status))


def _target(request: HttpRequest, value: str) -> Agent | Crew:
    """The agent or crew named `agent:<slug>` / `crew:<slug>` that this user may use: 404
    when unknown, 403 when object permissions keep it from this user."""
    which, _, slug = value.partition(":")
    if which == "agent":
        target = selectors.agent_get(tenant=request.tenant, slug=slug)
    elif which == "crew":
        target = selectors.crew_get(tenant=request.tenant, slug=slug)
    else:
        raise Http404("Choose an agent or a crew.")
    if not access.may_use(target, request.principal):
        raise PermissionDenied("You may not chat with this one.")
    return target


# -- one conversation --------------------------------------------------------------------
@tenant_member_required(Action.READ_DATA)
@require_GET
def conversation(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """The thread: the conversation's current branch, or with `?at=<message>` (a search
    hit) the branch through that message, which "Continue from here" makes current."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    through = None
    if request.GET.get("at"):
        through = conversations.conversation_message(
            conversation=chat, message_id=request.GET["at"]
        )
    turns = turns_for(chat, through)
    for turn in turns:
        if turn.run is not None:
            with_verdict(request.principal, turn.run)
    if turns and through is None:  # a failed last answer: Resume, for who may (the policy)
        turns[-1].may_resume = resumable(request, turns[-1].run)
    shown_tip = _tip(turns)
    context = _page(
        request,
        chat,
        turns=turns,
        queued=runs.queued_messages(tenant=request.tenant, conversation=chat),
        active=any(t.active for t in turns),
        target=chat.agent or chat.crew,
        may_use=_may_use_target(request, chat),
        other_branch=through is not None and shown_tip != chat.leaf_id,
        at=through,
        pending=conversations.attachments_pending(tenant=request.tenant, conversation=chat),
        **_targets(request),  # the header's picker: a new chat with another one
    )
    return _vary(render(request, PAGE, context))


def _tip(turns: list[Turn]) -> int | None:
    if not turns:
        return None
    last = turns[-1]
    message = last.answer_message or last.user_message
    return message.pk if message is not None else None


def _may_use_target(request: HttpRequest, chat: Conversation) -> bool:
    target = chat.agent or chat.crew
    return (
        target is not None
        and target.active
        and access.may_send(request.membership)
        and access.may_use(target, request.principal)
    )


@tenant_member_required(Action.START_RUN)
@require_POST
def send(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """A new turn: the message and a run answering it (executed by a worker). While the
    previous answer still works, the message is queued: it starts the next turn when that
    answer ends (agents.runs.steering)."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    attached = request.POST.getlist("attachment")
    return _start_turn(request, chat, request.POST.get("message", ""), attached=attached)


def _start_turn(
    request: HttpRequest,
    chat: Conversation,
    text: str = "",
    *,
    again: bool = False,
    attached: list[str] | None = None,
) -> HttpResponse:
    """A turn for `text` (with the `attached` files' ids), or (`again`) the last message
    answered again."""
    target = chat.agent or chat.crew
    if target is None or not target.active:
        return _refuse(
            request, chat, "The agent of this conversation is gone or inactive; start a new chat."
        )
    if not access.may_use(target, request.principal):
        raise PermissionDenied("You may not chat with this one.")
    if (refusal := budget_refusal(request.principal)) is not None:
        return _refuse(request, chat, refusal, 429)  # (per user, as REST)
    which = "agent" if isinstance(target, Agent) else "crew"
    try:
        if again:
            run = runs.run_regenerate(
                tenant=request.tenant, conversation=chat, initiated_by=request.user
            )
        else:
            run = runs.run_start(
                tenant=request.tenant,
                input=text,
                conversation=chat,
                initiated_by=request.user,
                attachments=_ids(attached or []),
                **{which: target},
            )
    except runs.ConversationBusy:
        if again:
            return _refuse(request, chat, runs.BUSY, 409)
        if attached:  # (a queued message is text: the files wait for a turn of their own)
            return _refuse(request, chat, ATTACHED_WHILE_BUSY, 409)
        return _queue(request, chat, text)
    except QuotaExceeded as exc:
        return _refuse(request, chat, str(exc), 429)
    except ValidationError as exc:
        return _refuse(request, chat, " ".join(exc.messages), 400)
    return _new_turn(request, chat, run)


def _new_turn(request: HttpRequest, chat: Conversation, run: Run) -> HttpResponse:
    if not _htmx(request):
        return redirect(chat_url(request, chat))
    turn = Turn(
        run=run,
        user_text=run.input,
        user_message=run.in_reply_to,
        is_last=True,
        attachments=conversations.run_message_attachments(run),
    )
    context = {
        "turn": turn,
        "conversation": chat,
        "tenant_slug": request.tenant.slug,
        "may_send": True,
    }
    return _vary(render(request, f"{THREAD}#turn", context))


def _ids(values: list[str]) -> list[int]:
    """Attachment ids from the form; one that is no id is refused as an unknown one."""
    ids = []
    for value in values:
        if not (value.isascii() and value.isdigit()) or not 0 < int(value) < 2**63:
            raise ValidationError({"attachments": "No such attachment waits to be sent here."})
        ids.append(int(value))
    return ids


def _queue(request: HttpRequest, chat: Conversation, text: str) -> HttpResponse:
    try:
        queued = runs.message_queue(
            tenant=request.tenant, conversation=chat, text=text, by=request.user
        )
    except runs.ConversationBusy:
        return _refuse(request, chat, runs.BUSY, 409)
    except QuotaExceeded as exc:
        return _refuse(request, chat, str(exc), 429)
    except ValidationError as exc:
        return _refuse(request, chat, " ".join(exc.messages), 400)
    return _queued(request, chat, queued)


def _queued(request: HttpRequest, chat: Conversation, queued, note: str = "") -> HttpResponse:
    """The queued message in the list under the thread; one that started at once (nothing
    was at work any more) is a new turn."""
    if queued.started_run is not None:
        if note and not _htmx(request):
            messages.info(request, note)
        response = _new_turn(request, chat, queued.started_run)
        if _htmx(request):  # (Steer targets the queued list: a turn goes to the thread)
            response["HX-Retarget"], response["HX-Reswap"] = "#thread", "beforeend"
            if note:
                response["X-Chat-Info"] = note  # (static/js/chat.js shows it by the composer)
        return response
    if not _htmx(request):
        messages.info(request, "Queued: it starts when the current answer ends.")
        return redirect(chat_url(request, chat))
    context = {"item": queued, "conversation": chat, "tenant_slug": request.tenant.slug}
    response = render(request, f"{THREAD}#queued_item", context)
    response["HX-Retarget"] = "#queued"
    response["HX-Reswap"] = "beforeend"
    return _vary(response)


@tenant_member_required(Action.START_RUN)
@require_POST
def steer(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """Steer the answer at work: the message joins its loop before the next model call. If
    it ended meanwhile, the message is the next turn instead (and the person is told)."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    target = chat.agent or chat.crew
    if target is None or not target.active:
        return _refuse(
            request, chat, "The agent of this conversation is gone or inactive; start a new chat."
        )
    if not access.may_use(target, request.principal):
        raise PermissionDenied("You may not chat with this one.")
    try:
        queued = runs.conversation_steer(
            tenant=request.tenant,
            conversation=chat,
            text=request.POST.get("message", ""),
            by=request.user,
        )
    except QuotaExceeded as exc:
        return _refuse(request, chat, str(exc), 429)
    except ValidationError as exc:
        return _refuse(request, chat, " ".join(exc.messages), 400)
    late = "The answer had finished: your message was sent as the next turn."
    return _queued(request, chat, queued, note=late if queued.kind == "turn" else "")


@tenant_member_required(Action.START_RUN)
@require_POST
def unqueue(request: HttpRequest, conversation_id: int, queued_id: int) -> HttpResponse:
    """Take back a queued message before it starts: the list item goes."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    try:
        runs.queued_remove(
            tenant=request.tenant, conversation=chat, queued_id=queued_id, by=request.user
        )
    except ValidationError as exc:
        return _refuse(request, chat, " ".join(exc.messages), 409)
    if not _htmx(request):
        return redirect(chat_url(request, chat))
    return _vary(HttpResponse(""))


def _refuse(request: HttpRequest, chat: Conversation, text: str, status: int = 400) -> HttpResponse:
    if not _htmx(request):
        messages.error(request, text)
        return redirect(chat_url(request, chat))
    # htmx swaps 2xx only: the refusal is a 200 retargeted to the composer's notice.
    response = render(request, f"{THREAD}#notice", {"text": text})
    response["X-Chat-Status"] = str(status)
    response["HX-Retarget"] = "#composer-notice"
    response["HX-Reswap"] = "innerHTML"
    return _vary(response)


def chat_url(request: HttpRequest, chat: Conversation) -> str:
    from django.urls import reverse

    return reverse(
        "chat:conversation", kwargs={"tenant_slug": request.tenant.slug, "conversation_id": chat.pk}
    )


@tenant_member_required(Action.START_RUN)
@require_POST
def regenerate(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """Answer the last message again: the new answer takes the old one's place (the htmx
    response replaces that turn)."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    return _start_turn(request, chat, again=True)


# -- branches: edit, switch, fork ------------------------------------------------------------
@tenant_member_required(Action.START_RUN)
@require_POST
def edit(request: HttpRequest, conversation_id: int, message_id: int) -> HttpResponse:
    """A new version of one of the user's messages, answered anew: the conversation goes on
    from there on a new branch, the old one a switch away."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    message = conversations.conversation_message(conversation=chat, message_id=message_id)
    target = chat.agent or chat.crew
    if target is not None and not access.may_use(target, request.principal):
        raise PermissionDenied("You may not chat with this one.")
    if (refusal := budget_refusal(request.principal)) is not None:
        return _refuse(request, chat, refusal, 429)
    try:
        runs.run_edit(
            tenant=request.tenant,
            conversation=chat,
            message=message,
            input=request.POST.get("message", ""),
            initiated_by=request.user,
        )
    except runs.ConversationBusy:
        return _refuse(request, chat, runs.BUSY, 409)
    except QuotaExceeded as exc:
        return _refuse(request, chat, str(exc), 429)
    except ValidationError as exc:
        return _refuse(request, chat, " ".join(exc.messages), 400)
    return redirect(chat_url(request, chat))


@tenant_member_required(Action.WRITE_DATA)
@require_POST
def switch(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """Show (and continue) the branch through the chosen message: another version of an
    edited message or of an answer, or a search hit's branch."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    if not access.may_send(request.membership):
        raise PermissionDenied("Viewers cannot change conversations.")
    message = conversations.conversation_message(
        conversation=chat, message_id=request.POST.get("message")
    )
    conversations.branch_switch(conversation=chat, message=message)
    return redirect(f"{chat_url(request, chat)}#message-{message.pk}")


@tenant_member_required(Action.START_RUN)
@require_POST
def fork(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """A new conversation holding this one's branch up to the chosen message; this one
    stays as it is."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    message = conversations.conversation_message(
        conversation=chat, message_id=request.POST.get("message")
    )
    try:
        forked = conversations.conversation_fork(
            tenant=request.tenant, conversation=chat, message=message
        )
    except ValidationError as exc:  # its files would pass the workspace's limit
        messages.error(request, " ".join(exc.messages))
        return redirect(chat_url(request, chat))
    messages.success(request, f"Forked into “{forked}”.")
    return redirect(chat_url(request, forked))


@tenant_member_required(Action.WRITE_DATA)
@require_http_methods(["GET", "POST"])
def rename(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """GET: the inline rename form (htmx) or a page; POST: save the title."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    context = {
        "item": chat,
        "tenant_slug": request.tenant.slug,
        "current": request.GET.get("current") == "1",
    }
    if request.method == "GET":
        if _htmx(request):
            return _vary(render(request, f"{SIDEBAR}#rename_form", context))
        return _vary(render(request, "web/chat/rename.html", context))
    if not access.may_send(request.membership):
        raise PermissionDenied("Viewers cannot rename conversations.")
    title = request.POST.get("title", "").strip()[:200]
    if title:
        try:
            chat = services.conversation_save(
                tenant=request.tenant, conversation=chat, changes={"title": title}
            )
        except ValidationError as exc:
            messages.error(request, " ".join(exc.messages))
    if _htmx(request):
        context["item"] = chat
        return _vary(render(request, f"{SIDEBAR}#conversation_item", context))
    return redirect(chat_url(request, chat))


@tenant_member_required(Action.WRITE_DATA)
@require_http_methods(["GET", "POST"])
def delete(request: HttpRequest, conversation_id: int) -> HttpResponse:
    """GET: ask for confirmation; POST: delete the conversation and its messages."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    if request.method == "GET":
        return render(
            request, "web/chat/delete.html", {"item": chat, "tenant_slug": request.tenant.slug}
        )
    if not access.may_send(request.membership):
        raise PermissionDenied("Viewers cannot delete conversations.")
    services.conversation_delete(tenant=request.tenant, conversation=chat)
    messages.success(request, f"Deleted “{chat}”.")
    return redirect("chat:index", tenant_slug=request.tenant.slug)


# -- runs: stream, stop, approvals ---------------------------------------------------------
def _run_of(request: HttpRequest, chat: Conversation, run_id: int) -> Run:
    return selectors.conversation_run(tenant=request.tenant, conversation=chat, run_id=run_id)


@tenant_member_required(Action.READ_DATA)
@require_GET
def stream(request: HttpRequest, conversation_id: int, run_id: int) -> StreamingHttpResponse:
    """The run's answer as HTML fragments over SSE, from `Last-Event-ID` or `?after=`."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    run = _run_of(request, chat, run_id)
    after = _after(request)
    live = RunStream(
        run, conversation_id=chat.pk, tenant_slug=request.tenant.slug, membership=request.membership
    )
    live.context["csrf_token"] = get_token(request)
    response = StreamingHttpResponse(live.events(after), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"
    return response


def _after(request: HttpRequest) -> int:
    for raw in (request.headers.get("Last-Event-ID"), request.GET.get("after")):
        raw = (raw or "").strip()
        if raw.isascii() and raw.isdigit():
            return min(int(raw), MAX_SEQ)
    return 0


@tenant_member_required(Action.CANCEL_RUN)
@require_POST
def cancel(request: HttpRequest, conversation_id: int, run_id: int) -> HttpResponse:
    """Stop: the live stream shows the run cancelled."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    run = runs.run_cancel(
        tenant=request.tenant, run=_run_of(request, chat, run_id), by=request.user
    )
    if not _htmx(request):
        return redirect(chat_url(request, chat))
    text = "Stopping…" if not run.is_terminal else "Stopped."
    return _vary(render(request, f"{THREAD}#run_state", {"run": run, "text": text}))


def resumable(request: HttpRequest, run: Run | None) -> bool:
    """Whether the chat offers Resume under this answer: its run failed and the viewer may
    resume it (agents.runs.may_resume: its starter or an admin, who may still use it)."""
    return run is not None and run.status == "failed" and runs.may_resume(request.principal, run)


@tenant_member_required(Action.RESUME_RUN)
@require_POST
def resume(request: HttpRequest, conversation_id: int, run_id: int) -> HttpResponse:
    """Resume the failed answer (agents.runs.resume) once its cause is fixed: for htmx, the
    turn's answer again (not the whole turn: the question's elements stay as they are), its
    run queued, whose stream picks up after the `run.resumed` event and shows the answer in
    the same place. A refusal says why in the composer's notice."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    run = _run_of(request, chat, run_id)
    if (refusal := budget_refusal(request.principal)) is not None:
        return _refuse(request, chat, refusal, 429)
    try:
        runs.run_resume(tenant=request.tenant, run=run, by=request.user)
    except runs.RunNotResumable as exc:
        return _refuse(request, chat, "Not resumed: " + " ".join(exc.messages), 409)
    if not _htmx(request):
        return redirect(chat_url(request, chat))
    chat = access.conversation_for(request.user, request.membership, conversation_id)  # its
    # branch as the resume left it: up to the question, until the resumed answer lands
    turn = next((t for t in turns_for(chat) if t.run is not None and t.run.pk == run.pk), None)
    if turn is None:  # (the branch moved meanwhile): the page shows where it stands
        response = HttpResponse(status=204)
        response["HX-Redirect"] = chat_url(request, chat)
        return _vary(response)
    context = {"turn": turn, "run": turn.run, "conversation_id": chat.pk,
               "tenant_slug": request.tenant.slug, "may_send": True}  # fmt: skip
    return _vary(render(request, f"{THREAD}#assistant", context))


@tenant_member_required(Action.DECIDE_APPROVAL)
@require_POST
def decide(request: HttpRequest, conversation_id: int, approval_id: int) -> HttpResponse:
    """Approve or reject a pending tool call of one of this conversation's runs; an approved
    last call resumes the run, which the open stream keeps showing."""
    chat = access.conversation_for(request.user, request.membership, conversation_id)
    approval = _approval_of(request, chat, approval_id)
    decision = request.POST.get("decision")
    if decision not in ("approve", "reject"):
        return _card(request, chat, approval, "Choose Approve or Reject.", 400)
    try:
        arguments = None
        if decision == "approve":
            arguments = edited_arguments(request.POST.get("arguments"), approval)
        approval = runs.approval_decide(
            tenant=request.tenant,
            approval=approval,
            approved=decision == "approve",
            by=request.user,
            reason=request.POST.get("reason", "").strip(),
            arguments=arguments,
        )
    except PermissionDenied as exc:  # the agent's approval authority is someone else's
        return _card(request, chat, approval, str(exc), 403)
    except ValidationError as exc:
        approval.refresh_from_db()
        status = 400 if approval.status == ApprovalStatus.PENDING else 409  # else: decided
        return _card(request, chat, approval, " ".join(exc.messages), status)
    return _card(request, chat, approval, "")


def _approval_of(request: HttpRequest, chat: Conversation, approval_id: int) -> Approval:
    return selectors.conversation_approval(
        tenant=request.tenant, conversation=chat, approval_id=approval_id
    )


def _card(
    request: HttpRequest, chat: Conversation, approval: Approval, problem: str, status: int = 200
):
    if not _htmx(request):
        if problem:
            messages.error(request, problem)
        return redirect(chat_url(request, chat))
    context = {
        "approval": for_display(approval),
        "problem": problem,
        "conversation_id": chat.pk,
        "tenant_slug": request.tenant.slug,
        "may_send": True,
    }
    # htmx swaps 2xx only: a refusal still shows the card, with what went wrong.
    response = render(request, f"{THREAD}#approval_card", context, status=200)
    if approval.replaced_by_id is not None:  # asked again: the new card follows the old one
        context["approval"] = for_display(approval.replaced_by)
        response.content += render(request, f"{THREAD}#approval_card", context).content
    response["X-Chat-Status"] = str(status)
    return _vary(response)
