/* openai_stream.c - one engine event in, the SSE event bodies vLLM sends out.
 *
 * Chat chunks are pydantic dumps with exclude_unset: only the keys vLLM sets
 * appear (the role event has no stop_reason, usage appears only when asked).
 * Completions chunks are dumped with every field. The first engine output of a
 * chat request produces one role event per choice before any content, never
 * earlier (clients time TTFT on it). Events that carry nothing (no text, no
 * token, nothing sent yet for the choice) are skipped, as vLLM skips them.
 * The lab's stream_coalesce buffers a choice's events and sends them as one
 * event with the texts concatenated (oai_stream_set_coalesce). The tokens
 * one engine step keeps for a choice (speculative decoding: engine_output_t
 * more_this_step) go out as one event too, with a logprobs entry each, as
 * vLLM sends a step's tokens: a client times one inter-token gap per step.
 */
#include <stdlib.h>
#include <string.h>

#include "openai_internal.h"

typedef struct {
    int64_t text_chars;  /* characters sent so far (completions text_offset) */
    int32_t n_tokens;    /* tokens sent so far */
    bool echoed;         /* completions: the prompt went out with the first event */
    bool finished;
    /* Events buffered for this choice, not yet sent (stream_coalesce, or the
     * rest of an engine step's tokens still to come). */
    oai_sb_t held_text;  /* their texts, concatenated */
    int32_t held_events, held_tokens;
    int32_t held_prompt; /* the prompt they belong to */
    engine_output_t held_last; /* the latest one (text unset): token, finish, stop */
    sample_result_t *held_lp; /* (held_tokens) each held token's logprobs, token set */
    int32_t cap_held_lp;
} stream_choice_t;

struct oai_stream {
    const oai_ctx_t *ctx;
    const oai_request_t *req;
    char *id;
    int64_t created;
    bool started;        /* chat: role events sent */
    int32_t n_choices;
    stream_choice_t *ch;
    int32_t coalesce;    /* stream_coalesce's tokens per event (0: off) */
    int64_t n_coalesced; /* events merged away, not yet taken */
};

oai_stream_t *oai_stream_new(const oai_ctx_t *ctx, const oai_request_t *req, const char *id, int64_t created) {
    oai_stream_t *s = sl_calloc(1, sizeof *s);
    s->ctx = ctx;
    s->req = req;
    s->id = sl_strdup(id);
    s->created = created;
    s->n_choices = req->n_prompts * req->params.n;
    s->ch = sl_calloc((size_t)(s->n_choices ? s->n_choices : 1), sizeof *s->ch);
    return s;
}

void oai_stream_free(oai_stream_t *s) {
    if (!s) return;
    for (int32_t i = 0; i < s->n_choices; i++) {
        free(s->ch[i].held_text.buf);
        free(s->ch[i].held_lp);
    }
    free(s->id);
    free(s->ch);
    free(s);
}

void oai_chunks_clear(oai_chunks_t *c) {
    for (int32_t i = 0; i < c->n; i++) free(c->json[i]);
    c->n = 0;
}

void oai_chunks_free(oai_chunks_t *c) {
    oai_chunks_clear(c);
    free(c->json);
    free(c->len);
    memset(c, 0, sizeof *c);
}

static void push(oai_chunks_t *c, oai_sb_t *b) {
    if (c->n == c->cap) {
        c->cap = c->cap ? 2 * c->cap : 4;
        c->json = sl_realloc(c->json, (size_t)c->cap * sizeof *c->json);
        c->len = sl_realloc(c->len, (size_t)c->cap * sizeof *c->len);
    }
    c->json[c->n] = sb_take(b, &c->len[c->n]);
    c->n++;
}

static int64_t prompt_len(const oai_stream_t *s, int32_t prompt_idx) { return s->req->prompts[prompt_idx].n_ids; }

static void chat_role_events(oai_stream_t *s, oai_chunks_t *out) {
    for (int32_t i = 0; i < s->req->params.n; i++) {
        oai_sb_t b = {0};
        oai_response_head(&b, s->ctx, s->id, "chat.completion.chunk", s->created);
        sb_printf(&b, ",\"choices\":[{\"index\":%d,\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                      "\"logprobs\":null,\"finish_reason\":null}]", i);
        if (s->req->continuous_usage_stats) {
            sb_puts(&b, ",\"usage\":");
            oai_usage(&b, prompt_len(s, 0), 0, false);
        }
        sb_puts(&b, "}");
        push(out, &b);
    }
}

/* lp[0 .. n_lp): the logprobs of the event's tokens (token set), one entry each. */
static void chat_event(oai_stream_t *s, int32_t i, const engine_output_t *o, const sample_result_t *lp, int32_t n_lp,
                       oai_chunks_t *out) {
    const oai_request_t *r = s->req;
    oai_sb_t b = {0};
    oai_response_head(&b, s->ctx, s->id, "chat.completion.chunk", s->created);
    sb_printf(&b, ",\"choices\":[{\"index\":%d,\"delta\":{\"content\":", i);
    sb_json_str(&b, o->text ? o->text : "", o->text ? o->text_len : 0);
    sb_puts(&b, "},\"logprobs\":");
    if (r->chat_logprobs) {
        sb_puts(&b, "{\"content\":[");
        for (int32_t k = 0; k < n_lp; k++) {
            if (k) sb_puts(&b, ",");
            oai_chat_logprob_entry(&b, s->ctx, r, &lp[k]);
        }
        sb_puts(&b, "]}");
    } else {
        sb_puts(&b, "null");
    }
    const char *fin = finish_reason_str(o->finish);
    if (fin) {
        sb_printf(&b, ",\"finish_reason\":\"%s\",\"stop_reason\":", fin);
        oai_stop_reason(&b, r, o->stop_index, o->stop_token);
        sb_puts(&b, "}]");
    } else {
        sb_puts(&b, ",\"finish_reason\":null}]");
    }
    if (r->continuous_usage_stats) {
        sb_puts(&b, ",\"usage\":");
        oai_usage(&b, prompt_len(s, 0), s->ch[i].n_tokens, false);
    }
    sb_puts(&b, "}");
    push(out, &b);
}

static void completion_event(oai_stream_t *s, int32_t prompt_idx, int32_t i, const engine_output_t *o,
                             const sample_result_t *lp, int32_t n_lp, oai_chunks_t *out) {
    const oai_request_t *r = s->req;
    stream_choice_t *c = &s->ch[i];
    const oai_prompt_t *p = &r->prompts[prompt_idx];
    oai_sb_t text = {0};
    if (r->echo && !c->echoed) sb_put(&text, p->text, p->text_len);
    c->echoed = true;
    sb_put(&text, o->text ? o->text : "", o->text ? o->text_len : 0);

    oai_sb_t b = {0};
    oai_response_head(&b, s->ctx, s->id, "text_completion", s->created);
    sb_printf(&b, ",\"choices\":[{\"index\":%d,\"text\":", i);
    sb_json_str(&b, text.buf ? text.buf : "", text.len);
    sb_puts(&b, ",\"logprobs\":");
    if (r->params.logprobs >= 0) {
        oai_completion_logprobs(&b, s->ctx, r, lp, n_lp, c->text_chars);
    } else {
        sb_puts(&b, "null");
    }
    c->text_chars += oai_utf8_chars(text.buf ? text.buf : "", text.len);
    c->n_tokens += o->n_new;
    const char *fin = finish_reason_str(o->finish);
    if (fin) sb_printf(&b, ",\"finish_reason\":\"%s\",\"stop_reason\":", fin);
    else sb_puts(&b, ",\"finish_reason\":null,\"stop_reason\":");
    oai_stop_reason(&b, r, o->stop_index, o->stop_token);
    sb_puts(&b, "}],\"usage\":");
    if (r->continuous_usage_stats) oai_usage(&b, p->n_ids, c->n_tokens, true);
    else sb_puts(&b, "null");
    sb_puts(&b, "}");
    free(text.buf);
    push(out, &b);
}

static void emit(oai_stream_t *s, int32_t prompt_idx, int32_t i, const engine_output_t *o, const sample_result_t *lp,
                 int32_t n_lp, oai_chunks_t *out) {
    if (s->req->kind == OAI_CHAT) {
        s->ch[i].n_tokens += o->n_new;
        chat_event(s, i, o, lp, n_lp, out);
    } else {
        completion_event(s, prompt_idx, i, o, lp, n_lp, out);
    }
}

/* Sends choice i's buffered events as one: the latest event's token, finish
 * and stop, with every buffered text, token and logprobs entry. */
static void flush_choice(oai_stream_t *s, int32_t i, oai_chunks_t *out) {
    stream_choice_t *c = &s->ch[i];
    if (c->held_events == 0) return;
    engine_output_t o = c->held_last;
    o.text = c->held_text.buf ? c->held_text.buf : "";
    o.text_len = c->held_text.len;
    o.n_new = c->held_tokens;
    if (s->coalesce) s->n_coalesced += c->held_events - 1; /* the lab's merges, not a step's */
    int32_t n_lp = c->held_tokens;
    c->held_events = c->held_tokens = 0;
    emit(s, c->held_prompt, i, &o, c->held_lp, n_lp, out);
    c->held_text.len = 0;
}

/* Buffers o for choice i; sends the buffer once it is complete: with
 * stream_coalesce, at `coalesce` tokens; otherwise at the step's last token
 * (o->more_this_step unset); always when o finishes the choice. */
static void hold_event(oai_stream_t *s, int32_t prompt_idx, int32_t i, const engine_output_t *o,
                       oai_chunks_t *out) {
    stream_choice_t *c = &s->ch[i];
    sb_put(&c->held_text, o->text ? o->text : "", o->text ? o->text_len : 0);
    if (o->n_new > 0) {
        if (c->held_tokens == c->cap_held_lp) {
            c->cap_held_lp = c->cap_held_lp ? 2 * c->cap_held_lp : 8;
            c->held_lp = sl_realloc(c->held_lp, (size_t)c->cap_held_lp * sizeof *c->held_lp);
        }
        c->held_lp[c->held_tokens] = o->logprobs;
        c->held_lp[c->held_tokens].token = o->token;
    }
    c->held_last = *o;
    c->held_last.text = NULL;
    c->held_last.next = NULL;
    c->held_prompt = prompt_idx;
    c->held_events++;
    c->held_tokens += o->n_new;
    bool complete = s->coalesce ? c->held_tokens >= s->coalesce : !o->more_this_step;
    if (complete || o->finish != FINISH_NONE) flush_choice(s, i, out);
}

int oai_stream_event(oai_stream_t *s, int32_t prompt_idx, const engine_output_t *o, oai_chunks_t *out) {
    const oai_request_t *r = s->req;
    int32_t before = out->n;
    int32_t i = prompt_idx * r->params.n + o->index;
    SL_ASSERT(i >= 0 && i < s->n_choices);
    stream_choice_t *c = &s->ch[i];
    if (r->kind == OAI_CHAT && !s->started) {
        s->started = true;
        chat_role_events(s, out);
    }
    if (c->finished) return out->n - before;
    bool has_text = o->text_len > 0 || (r->echo && !c->echoed && r->prompts[prompt_idx].text_len > 0);
    /* nothing to say yet (a choice with buffered events has said something) */
    if (!has_text && o->n_new == 0 && c->n_tokens == 0 && c->held_events == 0) return out->n - before;
    if (o->finish != FINISH_NONE) c->finished = true;
    if (s->coalesce || o->more_this_step || c->held_events > 0) {
        hold_event(s, prompt_idx, i, o, out);
    } else {
        sample_result_t lp = o->logprobs;
        lp.token = o->token;
        emit(s, prompt_idx, i, o, &lp, o->n_new > 0 ? 1 : 0, out);
    }
    return out->n - before;
}

void oai_stream_set_coalesce(oai_stream_t *s, int32_t tokens) {
    bool logprobs = s->req->kind == OAI_CHAT ? s->req->chat_logprobs : s->req->params.logprobs >= 0;
    s->coalesce = tokens >= 2 && !logprobs ? tokens : 0;
}

void oai_stream_flush(oai_stream_t *s, oai_chunks_t *out) {
    for (int32_t i = 0; i < s->n_choices; i++) flush_choice(s, i, out);
}

int64_t oai_stream_take_coalesced(oai_stream_t *s) {
    int64_t n = s->n_coalesced;
    s->n_coalesced = 0;
    return n;
}

char *oai_stream_usage(const oai_stream_t *s, size_t *len_out) {
    const oai_request_t *r = s->req;
    if (!r->include_usage) return NULL;
    int64_t prompt = 0, completion = 0;
    for (int32_t p = 0; p < r->n_prompts; p++) prompt += r->prompts[p].n_ids;
    for (int32_t i = 0; i < s->n_choices; i++) completion += s->ch[i].n_tokens;
    oai_sb_t b = {0};
    oai_response_head(&b, s->ctx, s->id, r->kind == OAI_CHAT ? "chat.completion.chunk" : "text_completion",
                      s->created);
    sb_puts(&b, ",\"choices\":[],\"usage\":");
    oai_usage(&b, prompt, completion, false);
    sb_puts(&b, "}");
    return sb_take(&b, len_out);
}
