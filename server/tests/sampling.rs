//! The sampling parameters of `asynct serve` over loopback, on the CPU with asynct-tiny (the byte
//! tokenizer: byte `b` is token `b`): each one honoured (checked against its definition where the
//! response shows enough of the raw row to rebuild it), logprobs in OpenAI's shapes for both
//! routes, streamed alike, `echo` with the prompt's logprobs (as lm-eval scores a continuation),
//! vLLM's `prompt_logprobs`, `n` with `best_of`, and what cannot be honoured refused by name.

#[allow(dead_code)] // the helpers this file does not call
mod serve_support;

use serde_json::{json, Value};
use serve_support::{Events, Server};

const EOS: u64 = 510;

fn ok(server: &Server, path: &str, body: &Value) -> Value {
    let r = server.post(path, body);
    assert_eq!(r.status, 200, "{body}: {}", r.text());
    r.json()
}

fn refused(server: &Server, path: &str, body: &Value, param: &str) -> String {
    let r = server.post(path, body);
    assert_eq!(r.status, 400, "{body}: {}", r.text());
    let e = r.json();
    assert_eq!(e["error"]["param"], param, "{body}: {e}");
    e["error"]["message"].as_str().unwrap().to_string()
}

fn completion(extra: Value) -> Value {
    let mut body = json!({"model": "tiny", "prompt": "The river runs", "max_tokens": 6, "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn chat(extra: Value) -> Value {
    let mut body = json!({"model": "tiny", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 5,
        "temperature": 0});
    for (k, v) in extra.as_object().unwrap() {
        body[k] = v.clone();
    }
    body
}

fn text(body: &Value, i: usize) -> &str {
    body["choices"][i]["text"].as_str().unwrap()
}

/// The data of a finished stream as JSON, `[DONE]` checked and dropped.
fn chunks(events: Events) -> Vec<Value> {
    let mut data = events.collect();
    assert_eq!(data.pop().as_deref(), Some("[DONE]"));
    data.iter().map(|d| serde_json::from_str(d).unwrap()).collect()
}

#[test]
fn each_parameter_is_honoured() {
    let server = Server::start("sampling-params", &["--max-model-len", "256"]);
    let x = u32::from(b'x');
    // logit_bias: +100 on `x` makes it every sampled token, even at temperature 1.
    let biased = ok(
        &server,
        "/v1/completions",
        &completion(json!({"logit_bias": {x.to_string(): 100},
        "temperature": 1, "seed": 3, "ignore_eos": true})),
    );
    assert_eq!(text(&biased, 0), "xxxxxx");
    // -100 on the greedy first token moves greedy elsewhere.
    let plain = ok(&server, "/v1/completions", &completion(json!({"logprobs": 0})));
    let first = plain["choices"][0]["logprobs"]["tokens"][0].as_str().unwrap().to_string();
    let tokenizer = model::byte_tokenizer::build().unwrap();
    let ids = tokenizer.encode(first.as_str(), false).unwrap().get_ids().to_vec();
    assert_eq!(ids.len(), 1, "the first token {first:?} encodes back to one id");
    let first_id = ids[0];
    let away = ok(&server, "/v1/completions", &completion(json!({"logit_bias": {first_id.to_string(): -100}})));
    assert!(!text(&away, 0).starts_with(&first), "{first:?} still first in {:?}", text(&away, 0));
    // min_tokens holds off eos however likely; then eos ends the choice.
    let eos_bias = json!({EOS.to_string(): 100});
    let held = ok(&server, "/v1/completions", &completion(json!({"logit_bias": eos_bias, "min_tokens": 4})));
    assert_eq!(
        (held["usage"]["completion_tokens"].as_u64(), held["choices"][0]["finish_reason"].as_str()),
        (Some(5), Some("stop"))
    );
    // stop_token_ids end the choice; its text shows only with include_stop_str_in_output.
    for (include, want) in [(false, ""), (true, "x")] {
        let body = completion(json!({"logit_bias": {x.to_string(): 100}, "stop_token_ids": [x],
            "include_stop_str_in_output": include, "ignore_eos": true}));
        let r = ok(&server, "/v1/completions", &body);
        assert_eq!((text(&r, 0), r["choices"][0]["finish_reason"].as_str()), (want, Some("stop")), "{include}");
    }
    // include_stop_str_in_output keeps a stop string.
    let full = text(&plain, 0).to_string();
    let stop: String = full.chars().skip(2).take(2).collect();
    let cut = ok(&server, "/v1/completions", &completion(json!({"stop": [stop]})));
    let kept = ok(&server, "/v1/completions", &completion(json!({"stop": [stop], "include_stop_str_in_output": true})));
    assert_eq!(format!("{}{stop}", text(&cut, 0)), text(&kept, 0));
    assert!(full.starts_with(text(&kept, 0)));
    // frequency and presence penalties, greedy, against their definition rebuilt from the raw
    // row's top 20 logprobs (chat's, whose `bytes` tell tokens apart): the winner is the best of
    // them after subtracting f * count + p, whenever that beats every token outside the 20.
    for (f, p) in [(2.0, 0.0), (0.0, 2.0), (1.5, 0.5)] {
        let body = chat(json!({"frequency_penalty": f, "presence_penalty": p, "logprobs": true, "top_logprobs": 20,
            "max_tokens": 12, "ignore_eos": true}));
        let r = ok(&server, "/v1/chat/completions", &body);
        let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
        let tokens: Vec<&Value> = content.iter().map(|e| &e["bytes"]).collect();
        let mut checked = 0;
        for (i, e) in content.iter().enumerate() {
            let top = e["top_logprobs"].as_array().unwrap();
            let processed = |t: &Value| {
                let count = tokens[..i].iter().filter(|&&seen| seen == &t["bytes"]).count() as f64;
                t["logprob"].as_f64().unwrap() - if count > 0.0 { f * count + p } else { 0.0 }
            };
            let floor = top[19]["logprob"].as_f64().unwrap();
            let best = top.iter().max_by(|a, b| processed(a).total_cmp(&processed(b))).unwrap();
            if processed(best) > floor + 1e-4 {
                assert_eq!(&e["bytes"], &best["bytes"], "f {f} p {p}, token {i}");
                checked += 1;
            }
        }
        assert!(checked >= 6, "f {f} p {p}: only {checked} of 12 tokens decided within the top 20");
    }
    // min_p at 1 keeps only the likeliest token: temperature 2 becomes greedy.
    let hot = ok(&server, "/v1/completions", &completion(json!({"temperature": 2, "min_p": 1, "seed": 9})));
    assert_eq!(text(&hot, 0), text(&plain, 0));
    // Each parameter set repeats itself.
    for extra in [json!({"repetition_penalty": 1.5}), json!({"presence_penalty": -1, "temperature": 1, "seed": 4})] {
        let a = ok(&server, "/v1/completions", &completion(extra.clone()));
        let b = ok(&server, "/v1/completions", &completion(extra.clone()));
        assert_eq!(text(&a, 0), text(&b, 0), "{extra}");
    }
    // The developer role is a system message; chat's max_tokens defaults to the rest of the context.
    let dev = json!({"model": "tiny", "messages": [{"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "Hi"}], "temperature": 0, "ignore_eos": true});
    let r = ok(&server, "/v1/chat/completions", &dev);
    let usage = &r["usage"];
    assert_eq!(usage["prompt_tokens"].as_u64().unwrap() + usage["completion_tokens"].as_u64().unwrap(), 256, "{r}");
    assert_eq!(r["choices"][0]["finish_reason"], "length");
}

#[test]
fn logprobs_in_openais_shapes_streamed_alike_and_echo_scores_a_continuation() {
    let server = Server::start("sampling-logprobs", &[]);
    // Completions: four lists, one entry per token, top maps of the 3 likeliest and the chosen.
    let r = ok(&server, "/v1/completions", &completion(json!({"logprobs": 3})));
    let lp = &r["choices"][0]["logprobs"];
    let n = r["usage"]["completion_tokens"].as_u64().unwrap() as usize;
    for list in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
        assert_eq!(lp[list].as_array().unwrap().len(), n, "{list}: {lp}");
    }
    let tokens: Vec<&str> = lp["tokens"].as_array().unwrap().iter().map(|t| t.as_str().unwrap()).collect();
    for (i, top) in lp["top_logprobs"].as_array().unwrap().iter().enumerate() {
        let top = top.as_object().unwrap();
        assert!((3..=4).contains(&top.len()), "{top:?}");
        let chosen = lp["token_logprobs"][i].as_f64().unwrap();
        assert_eq!(top[tokens[i]].as_f64().unwrap(), chosen);
        // Greedy: the chosen token is the likeliest.
        assert!(top.values().all(|v| v.as_f64().unwrap() <= chosen), "{top:?}");
        assert!(chosen <= 0.0);
    }
    let offsets: Vec<u64> = lp["text_offset"].as_array().unwrap().iter().map(|o| o.as_u64().unwrap()).collect();
    assert_eq!(offsets[0], 0);
    assert!(offsets.windows(2).all(|w| w[0] < w[1]));

    // Streamed: the same tokens and numbers, chunk by chunk.
    let mut body = completion(json!({"logprobs": 3}));
    body["stream"] = json!(true);
    let mut streamed = json!({"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []});
    for c in chunks(server.stream("/v1/completions", &body)) {
        for choice in c["choices"].as_array().unwrap() {
            if choice["logprobs"].is_null() {
                continue;
            }
            for list in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
                let items = choice["logprobs"][list].as_array().unwrap().clone();
                streamed[list].as_array_mut().unwrap().extend(items);
            }
        }
    }
    assert_eq!(&streamed, lp);

    // Chat: content entries with bytes and exactly top_logprobs alternatives, streamed alike.
    let body = chat(json!({"logprobs": true, "top_logprobs": 2}));
    let r = ok(&server, "/v1/chat/completions", &body);
    let content = r["choices"][0]["logprobs"]["content"].as_array().unwrap().clone();
    assert_eq!(content.len() as u64, r["usage"]["completion_tokens"].as_u64().unwrap());
    for e in &content {
        let token = e["token"].as_str().unwrap();
        let bytes: Vec<u8> = e["bytes"].as_array().unwrap().iter().map(|b| b.as_u64().unwrap() as u8).collect();
        assert!(token == String::from_utf8_lossy(&bytes) || token == "\u{fffd}", "{token:?} {bytes:?}");
        assert_eq!(e["top_logprobs"].as_array().unwrap().len(), 2);
        assert_eq!(e["top_logprobs"][0]["logprob"], e["logprob"], "greedy picks the likeliest");
    }
    let mut stream_body = body.clone();
    stream_body["stream"] = json!(true);
    let streamed: Vec<Value> = chunks(server.stream("/v1/chat/completions", &stream_body))
        .iter()
        .flat_map(|c| c["choices"].as_array().unwrap().clone())
        .filter(|c| !c["logprobs"].is_null())
        .flat_map(|c| c["logprobs"]["content"].as_array().unwrap().clone())
        .collect();
    assert_eq!(streamed, content);
    assert!(ok(&server, "/v1/chat/completions", &chat(json!({})))["choices"][0]["logprobs"].is_null());

    // Echo: the prompt's text and logprobs first, the first null; the continuation's logprobs
    // under echo equal those it had when generated (lm-eval's loglikelihood).
    let prompt = "The river runs";
    let generated = ok(&server, "/v1/completions", &completion(json!({"logprobs": 1, "max_tokens": 4})));
    let continuation = text(&generated, 0).to_string();
    let gen_lp: Vec<f64> = generated["choices"][0]["logprobs"]["token_logprobs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    let whole = format!("{prompt}{continuation}");
    let body =
        json!({"model": "tiny", "prompt": whole, "max_tokens": 1, "temperature": 0, "logprobs": 1, "echo": true});
    let scored = ok(&server, "/v1/completions", &body);
    assert!(text(&scored, 0).starts_with(&whole));
    let lp = &scored["choices"][0]["logprobs"];
    let prompt_tokens = scored["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(lp["tokens"].as_array().unwrap().len(), prompt_tokens + 1);
    assert!(lp["token_logprobs"][0].is_null() && lp["top_logprobs"][0].is_null());
    let token_lp = lp["token_logprobs"].as_array().unwrap();
    let ctx = prompt_tokens - gen_lp.len();
    for (k, want) in gen_lp.iter().enumerate() {
        let got = token_lp[ctx + k].as_f64().unwrap();
        assert!((got - want).abs() < 1e-4, "continuation token {k}: {got} under echo, {want} generated");
    }
    // max_tokens 0 with echo scores the prompt alone: the same numbers, no generated token.
    let mut body = body.clone();
    body["max_tokens"] = json!(0);
    let alone = ok(&server, "/v1/completions", &body);
    assert_eq!((text(&alone, 0), alone["usage"]["completion_tokens"].as_u64()), (whole.as_str(), Some(0)));
    assert_eq!(alone["choices"][0]["finish_reason"], "length");
    let only = alone["choices"][0]["logprobs"]["token_logprobs"].as_array().unwrap();
    assert_eq!(only[..], token_lp[..prompt_tokens]);
    refused(&server, "/v1/completions", &completion(json!({"max_tokens": 0})), "max_tokens");
    // Echo without logprobs repeats the text only; streamed, the prompt comes first.
    let r = ok(&server, "/v1/completions", &completion(json!({"echo": true})));
    assert!(text(&r, 0).starts_with(prompt) && r["choices"][0]["logprobs"].is_null());
    let mut body = completion(json!({"echo": true, "logprobs": 0}));
    body["stream"] = json!(true);
    let first = chunks(server.stream("/v1/completions", &body)).remove(0);
    assert_eq!(first["choices"][0]["text"], prompt);
    assert!(first["choices"][0]["logprobs"]["token_logprobs"][0].is_null());

    // truncate_prompt_tokens keeps the last k tokens: the request is the one whose prompt is what
    // is left, echoed as such, in every prompt form and on chat. Byte b is token b.
    let ids: Vec<u32> = prompt.bytes().map(u32::from).collect();
    let cut =
        ok(&server, "/v1/completions", &completion(json!({"prompt": ids, "truncate_prompt_tokens": 5, "echo": true})));
    let short = ok(&server, "/v1/completions", &completion(json!({"prompt": ids[ids.len() - 5..], "echo": true})));
    assert_eq!((text(&cut, 0), &cut["usage"]), (text(&short, 0), &short["usage"]));
    assert!(text(&cut, 0).starts_with(" runs") && cut["usage"]["prompt_tokens"] == 5, "{cut}");
    let whole = ok(&server, "/v1/completions", &completion(json!({"prompt": ids, "truncate_prompt_tokens": -1})));
    assert_eq!(whole["usage"]["prompt_tokens"], ids.len());
    // A text prompt is cut after tokenising; the echo shows the text of the tokens left.
    let text_cut =
        |echo: bool| ok(&server, "/v1/completions", &completion(json!({"truncate_prompt_tokens": 2, "echo": echo})));
    let (echoed, plain) = (text_cut(true), text_cut(false));
    let left = text(&echoed, 0).strip_suffix(text(&plain, 0)).unwrap();
    assert!(prompt.ends_with(left) && left.len() < prompt.len(), "{left:?}");
    assert_eq!(echoed["usage"]["prompt_tokens"], 2);
    let chat_cut = ok(&server, "/v1/chat/completions", &chat(json!({"truncate_prompt_tokens": 3})));
    assert_eq!(chat_cut["usage"]["prompt_tokens"], 3);
    // Uncut, a chat too long for the model is refused on the field it came from.
    let long = json!([{"role": "user", "content": "x y ".repeat(3000)}]);
    let message = refused(&server, "/v1/chat/completions", &chat(json!({"messages": long})), "messages");
    assert!(message.contains("the model's length"), "{message}");
    refused(&server, "/v1/completions", &completion(json!({"truncate_prompt_tokens": 0})), "truncate_prompt_tokens");
}

#[test]
fn best_of_returns_the_n_best_candidates_and_refusals_name_their_parameter() {
    let server = Server::start("sampling-best-of", &[]);
    let hot = |n: usize, best_of: usize| {
        completion(
            json!({"temperature": 1.2, "seed": 21, "n": n, "best_of": best_of, "logprobs": 0, "ignore_eos": true}),
        )
    };
    let all = ok(&server, "/v1/completions", &hot(4, 4));
    let cumulative = |choice: &Value| -> f64 {
        choice["logprobs"]["token_logprobs"].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).sum()
    };
    let mut ranked: Vec<(f64, String)> = all["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| (cumulative(c), c["text"].as_str().unwrap().into()))
        .collect();
    ranked.sort_by(|a, b| b.0.total_cmp(&a.0));
    let best = ok(&server, "/v1/completions", &hot(2, 4));
    let got: Vec<String> =
        best["choices"].as_array().unwrap().iter().map(|c| c["text"].as_str().unwrap().into()).collect();
    assert_eq!(got, vec![ranked[0].1.clone(), ranked[1].1.clone()]);
    assert_eq!(best["choices"][1]["index"], 1);

    // Refusals name the parameter: an engine refusal too (top_p 1e-50 is 0 as a 32-bit float).
    let message = refused(&server, "/v1/completions", &completion(json!({"top_p": 1e-50})), "top_p");
    assert!(message.contains("got 0"), "{message}");
    refused(&server, "/v1/completions", &completion(json!({"suffix": "end"})), "suffix");
    refused(&server, "/v1/chat/completions", &chat(json!({"tools": [{"type": "function"}]})), "tools");
    refused(
        &server,
        "/v1/chat/completions",
        &chat(json!({"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}})),
        "response_format",
    );
    refused(&server, "/v1/completions", &completion(json!({"best_of": 2, "stream": true})), "best_of");
    refused(&server, "/v1/completions", &completion(json!({"min_tokens": 7})), "min_tokens");
    refused(&server, "/v1/completions", &completion(json!({"logit_bias": {"600": 1}})), "logit_bias");
    // And the server still answers.
    ok(&server, "/v1/completions", &completion(json!({})));
}

#[test]
fn guided_outputs_are_a_choice_or_a_json_object_streamed_alike() {
    let server = Server::start("sampling-guided", &[]);
    let words = ["the river", "the", "a moon"];
    for seed in 0..4 {
        let body = completion(json!({"guided_choice": words, "temperature": 1.0, "seed": seed, "max_tokens": 16}));
        let r = ok(&server, "/v1/completions", &body);
        assert!(words.contains(&text(&r, 0)) && r["choices"][0]["finish_reason"] == "stop", "{r}");
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let pieces: String = chunks(server.stream("/v1/completions", &streamed))
            .iter()
            .flat_map(|c| c["choices"].as_array().unwrap().clone())
            .map(|c| c["text"].as_str().unwrap().to_string())
            .collect();
        assert_eq!(pieces, text(&r, 0), "seed {seed}: streamed alike");
    }
    // vLLM's newer field for the same: a chat reply that is one of the words.
    let body = chat(json!({"structured_outputs": {"choice": words}, "temperature": 1.0, "seed": 5, "max_tokens": 16}));
    let reply = ok(&server, "/v1/chat/completions", &body);
    assert!(words.contains(&reply["choices"][0]["message"]["content"].as_str().unwrap()), "{reply}");
    // vLLM's guided_regex: a whole match, every draw.
    for seed in 0..4 {
        let body = completion(json!({"guided_regex": "(ab|[0-9]{2,3})-x?", "temperature": 1.0, "seed": seed,
            "max_tokens": 16}));
        let r = ok(&server, "/v1/completions", &body);
        let t = text(&r, 0);
        let digits = t.strip_suffix("-x").or_else(|| t.strip_suffix('-')).unwrap_or_else(|| panic!("{t:?}"));
        assert!(
            digits == "ab" || ((2..=3).contains(&digits.len()) && digits.bytes().all(|b| b.is_ascii_digit())),
            "{t:?}"
        );
        assert_eq!(r["choices"][0]["finish_reason"], "stop");
    }
    // OpenAI's JSON mode on chat: the reply is an object once the model ends it.
    let mut finished = 0;
    for seed in 0..8 {
        let body = chat(json!({"response_format": {"type": "json_object"}, "temperature": 1.0, "seed": seed,
            "max_tokens": 48}));
        let r = ok(&server, "/v1/chat/completions", &body);
        let reply = r["choices"][0]["message"]["content"].as_str().unwrap();
        assert!(reply.starts_with('{'), "{reply:?}");
        if r["choices"][0]["finish_reason"] == "stop" {
            serde_json::from_str::<serde_json::Map<String, Value>>(reply).unwrap();
            finished += 1;
        }
    }
    assert!(finished > 0, "no object was finished in eight draws");
    refused(&server, "/v1/completions", &completion(json!({"guided_choice": ["a"], "min_tokens": 1})), "guided_choice");
}

#[test]
fn prompt_logprobs_as_vllm_reports_them_beside_echo_and_on_chat() {
    let server = Server::start("sampling-prompt-logprobs", &[]);
    // Both kinds of prompt scoring in one request, with different tops: the engine scores the
    // larger, and each part shows what it asked for.
    // The prompt as ids (byte b is token b), so that each position's token id is known.
    let ids: Vec<u32> = "The river runs".bytes().map(u32::from).collect();
    let scoring = |extra: Value| {
        let mut body = completion(extra);
        body["prompt"] = json!(ids);
        ok(&server, "/v1/completions", &body)
    };
    let r = scoring(json!({"prompt_logprobs": 3, "echo": true, "logprobs": 1, "max_tokens": 2}));
    let prompt_tokens = r["usage"]["prompt_tokens"].as_u64().unwrap() as usize;
    assert_eq!(prompt_tokens, ids.len());
    let scored = r["choices"][0]["prompt_logprobs"].as_array().unwrap().clone();
    assert_eq!(scored.len(), prompt_tokens);
    assert!(scored[0].is_null());
    let echo = &r["choices"][0]["logprobs"];
    for (i, entry) in scored.iter().enumerate().skip(1) {
        let entry = entry.as_object().unwrap();
        let token = &entry[&ids[i].to_string()];
        assert_eq!(token["logprob"], echo["token_logprobs"][i], "position {i}");
        assert_eq!(token["decoded_token"], echo["tokens"][i]);
        // The three likeliest carry ranks 1 to 3 in falling order; the prompt token's rank is
        // its place among them, or past them with a logprob no higher than the third's.
        let mut top: Vec<(u64, f64)> = entry
            .values()
            .filter(|e| e["rank"].as_u64().unwrap() <= 3)
            .map(|e| (e["rank"].as_u64().unwrap(), e["logprob"].as_f64().unwrap()))
            .collect();
        top.sort_by_key(|t| t.0);
        assert_eq!(top.iter().map(|t| t.0).collect::<Vec<_>>(), vec![1, 2, 3], "{entry:?}");
        assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "{entry:?}");
        let rank = token["rank"].as_u64().unwrap();
        assert_eq!(entry.len(), if rank <= 3 { 3 } else { 4 }, "{entry:?}");
        if rank > 3 {
            assert!(token["logprob"].as_f64().unwrap() <= top[2].1);
        }
        // Echo's own top holds the one likeliest it asked for and the prompt token.
        let echo_top = echo["top_logprobs"][i].as_object().unwrap();
        assert!((1..=2).contains(&echo_top.len()), "{echo_top:?}");
        assert_eq!(echo_top.values().map(|v| v.as_f64().unwrap()).fold(f64::MIN, f64::max), top[0].1);
    }
    // Without echo the same numbers, each of n choices carrying them; absent when not asked.
    let plain = scoring(json!({"prompt_logprobs": 3, "n": 2}));
    assert!(!text(&plain, 0).starts_with("The river"));
    for i in 0..2 {
        assert_eq!(plain["choices"][i]["prompt_logprobs"].as_array().unwrap(), &scored);
    }
    let none = ok(&server, "/v1/completions", &completion(json!({})));
    assert!(none["choices"][0].get("prompt_logprobs").is_none(), "{none}");
    // A prompt's choices share one scoring of it: each echoes the lone request's logprobs.
    let three = scoring(json!({"echo": true, "logprobs": 1, "max_tokens": 2, "n": 3, "temperature": 1.0, "seed": 4}));
    for i in 0..3 {
        for list in ["tokens", "token_logprobs", "top_logprobs", "text_offset"] {
            let got = three["choices"][i]["logprobs"][list].as_array().unwrap();
            assert_eq!(got[..prompt_tokens], echo[list].as_array().unwrap()[..prompt_tokens], "choice {i} {list}");
        }
    }

    // Chat: one list beside the choices, over the rendered prompt.
    let c = ok(&server, "/v1/chat/completions", &chat(json!({"prompt_logprobs": 0})));
    let scored = c["prompt_logprobs"].as_array().unwrap();
    assert_eq!(scored.len() as u64, c["usage"]["prompt_tokens"].as_u64().unwrap());
    assert!(scored[0].is_null());
    assert!(scored[1..].iter().all(|e| e.as_object().unwrap().len() == 1));
    assert!(ok(&server, "/v1/chat/completions", &chat(json!({}))).get("prompt_logprobs").is_none());

    let streamed = completion(json!({"prompt_logprobs": 1, "stream": true}));
    refused(&server, "/v1/completions", &streamed, "prompt_logprobs");
}
