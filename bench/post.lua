-- wrk script: POST one task per request.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"input": "Summarise the A2A protocol in one sentence.", "metadata": {"bench": true}}'
