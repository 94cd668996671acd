"""Real error bodies, byte for byte, as each server writes them (shared by the recogniser's tests and
the verdict property test). Sources: captured on loopback from nginx 1.22.1, HAProxy 2.6.12,
Caddy 2.6.2 and smg 1.13.0; read from the vLLM (0.9-0.34), SGLang 0.5.23 and LiteLLM 1.110 wheels and
Envoy's source; the OpenAI API's as quoted in issue threads (crewAI-examples#121, continuedev/continue#9358,
aider#2030); llama.cpp server's as quoted in issue threads (2025 builds); TGI's from
router/src/validation.rs."""

NGINX_413 = ("<html>\r\n<head><title>413 Request Entity Too Large</title></head>\r\n<body>\r\n<center><h1>413 Request "
             "Entity Too Large</h1></center>\r\n<hr><center>nginx/1.22.1</center>\r\n</body>\r\n</html>\r\n")
NGINX_502_TOKENS_OFF = ("<html>\r\n<head><title>502 Bad Gateway</title></head>\r\n<body>\r\n<center><h1>502 Bad Gateway"
                        "</h1></center>\r\n<hr><center>nginx</center>\r\n</body>\r\n</html>\r\n")
HAPROXY_413 = "<html><body><h1>413 Payload Too Large</h1>\nThe request entity exceeds the maximum allowed.\n</body></html>\n"
HAPROXY_504 = "<html><body><h1>504 Gateway Time-out</h1>\nThe server didn't respond in time.\n</body></html>\n"
VLLM_034 = ('{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, your prompt contains at '
            'least 4097 input tokens, which exceeds this limit even without any output tokens. Please reduce the length '
            'of the input prompt. (parameter=input_tokens, value=4097)","type":"BadRequestError","param":"input_tokens",'
            '"code":400}}')
VLLM_012 = ('{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, your request has 2301 input '
            'tokens. Please reduce the length of the input messages.","type":"BadRequestError","param":null,"code":400}}')
VLLM_010_FLAT = ('{"object":"error","message":"This model\'s maximum context length is 4096 tokens. However, you requested '
                 '5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or '
                 'completion.","type":"BadRequestError","param":null,"code":400}')
VLLM_016 = ('{"error":{"message":"You passed 9000 input tokens and requested 100 output tokens. However, the model\'s context '
            'length is only 8192 tokens, resulting in a maximum input length of 8092 tokens. Please reduce the length of the '
            'input prompt. (parameter=input_tokens, value=9000)","type":"BadRequestError","param":"input_tokens","code":400}}')
VLLM_CHARS = ('{"error":{"message":"This model\'s maximum context length is 4096 tokens. However, your prompt contains 90000 '
              'characters (more than 73728 characters, which is the upper bound for 4096 input tokens). Please reduce the '
              'length of the input prompt. (parameter=input_text, value=90000)","type":"BadRequestError",'
              '"param":"input_text","code":400}}')
VLLM_MODEL = '{"error":{"message":"The model `gpt-4` does not exist.","type":"NotFoundError","param":"model","code":404}}'
VLLM_BUSY = ('{"error":{"message":"The engine is currently busy and cannot accept new requests. Please try again later or '
             'on a different instance.","type":"Service Unavailable","param":null,"code":503}}')
VLLM_TOOLS = ('{"error":{"message":"\\"auto\\" tool choice requires --enable-auto-tool-choice and --tool-call-parser to be '
              'set","type":"BadRequestError","param":null,"code":400}}')
SGLANG_INPUT = ('{"object":"error","message":"The input (40001 tokens) is longer than the model\'s context length (40000 '
                'tokens).","type":"BadRequestError","param":null,"code":400}')
SGLANG_TOTAL = ('{"object":"error","message":"Requested token count exceeds the model\'s maximum context length of 4096 '
                'tokens. You requested a total of 4200 tokens: 4000 tokens from the input messages and 200 tokens for the '
                'completion. Please reduce the number of tokens in the input messages or the completion to fit within the '
                'limit.","type":"BadRequestError","param":null,"code":400}')
SGLANG_QUEUE = '{"object":"error","message":"The request queue is full.","type":"503","param":null,"code":503}'
LITELLM_CONTEXT = ('{"error":{"message":"litellm.ContextWindowExceededError: litellm.BadRequestError: '
                   'ContextWindowExceededError: Hosted_vllmException - This model\'s maximum context length is 4096 tokens. '
                   'However, your request has 5000 input tokens. Please reduce the length of the input messages.",'
                   '"type":"invalid_request_error","param":null,"code":"400"}}')
LITELLM_AUTH = ('{"error":{"message":"Authentication Error, Invalid proxy server token passed","type":"auth_error",'
                '"param":"None","code":"401"}}')
LITELLM_RATE = ('{"error":{"message":"Rate limit exceeded for api_key: sk-...: 10. Limit type: requests. Current limit: 10, '
                'Remaining: 0. Limit resets at: 2026-12-05 07:00:00 UTC","type":"rate_limit_error","param":null,'
                '"code":"429"}}')
OPENAI_CONTEXT = ('{\n  "error": {\n    "message": "This model\'s maximum context length is 8192 tokens. However, your '
                  'messages resulted in 8227 tokens. Please reduce the length of the messages.",\n    "type": '
                  '"invalid_request_error",\n    "param": "messages",\n    "code": "context_length_exceeded"\n  }\n}\n')
OPENAI_KEY = ('{"error":{"message":"Incorrect API key provided: sk-proj-****MxYA. You can find your API key at '
              'https://platform.openai.com/account/api-keys.","type":"invalid_request_error","param":null,'
              '"code":"invalid_api_key"}}')
OPENAI_MODEL = ('{"error":{"message":"The model `gpt-4o` does not exist or you do not have access to it.","type":'
                '"invalid_request_error","param":null,"code":"model_not_found"}}')
SMG_NO_WORKER = ('{"error":{"type":"invalid_request_error","code":"model_not_found","message":"No worker available for '
                 'model \'m\'","param":null}}')
LLAMACPP_CONTEXT = ('{"error":{"code":400,"message":"request (4476 tokens) exceeds the available context size (4096 '
                    'tokens)","type":"exceed_context_size_error","n_prompt_tokens":4476,"n_ctx":4096}}')
LLAMACPP_CONTEXT_OLD = ('{"error":{"code":400,"message":"the request exceeds the available context size, try increasing '
                        'it","type":"exceed_context_size_error"}}')
TGI_TOTAL = ('{"error":"Input validation error: `inputs` tokens + `max_new_tokens` must be <= 4096. Given: 4000 `inputs` '
             'tokens and 200 `max_new_tokens`","error_type":"validation"}')
TGI_INPUT = '{"error":"Input validation error: `inputs` must have less than 4095 tokens. Given: 5000","error_type":"validation"}'
# The Messages API's envelope: Anthropic's API (its errors reference) and vLLM's anthropic
# entrypoint, which wraps its engine's text in the same shape.
ANTHROPIC_OVERLOADED = '{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}'
ANTHROPIC_RATE = ('{"type":"error","error":{"type":"rate_limit_error","message":"This request would exceed the rate '
                  'limit for your organization of 50 requests per minute."}}')
ANTHROPIC_CONTEXT = ('{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 '
                     'tokens > 200000 maximum"}}')
VLLM_MESSAGES_CONTEXT = ('{"type":"error","error":{"type":"invalid_request_error","message":"This model\'s maximum '
                         'context length is 4096 tokens. However, your prompt contains at least 4097 input tokens, '
                         'which exceeds this limit even without any output tokens."}}')
FASTAPI_404 = '{"detail":"Not Found"}'
# LiteLLM 1.108.7 (openai/ provider, num_retries 0) passing on its engine's answer for load, quoting it;
# captured on loopback in front of `repro sim --dialect vllm` (with them, llm_provider-* headers: the
# upstream's own, llm_provider-retry-after and llm_provider-server among them; no plain Retry-After).
LITELLM_RELAYED_429 = ('{"error":{"message":"litellm.RateLimitError: RateLimitError: OpenAIException - Rate limit '
                       'exceeded: too many requests. Retry after 1 s.\\n\\nLiteLLM: model group \'m\' failed with the '
                       'error above. No fallback was attempted.","type":"throttling_error","param":null,"code":"429"}}')
LITELLM_RELAYED_BUSY = ('{"error":{"message":"litellm.ServiceUnavailableError: ServiceUnavailableError: OpenAIException - '
                        'The engine is currently busy and cannot accept new requests. Please try again later or on a '
                        'different instance.\\n\\nLiteLLM: model group \'m\' failed with the error above. No fallback '
                        'was attempted.","type":"internal_server_error","param":null,"code":"503"}}')
# The sim's rate-limit fault on the OpenAI paths, vLLM's envelope (repro/sim/turned_away.py).
VLLM_RATE = ('{"error":{"message":"Rate limit exceeded: too many requests. Retry after 1 s.","type":"RateLimitError",'
             '"param":null,"code":429}}')
