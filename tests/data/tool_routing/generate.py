# ruff: noqa: E501  (the tool cards and requests are data, a line each)
"""Writes tools.json and requests.json: the labelled set tool routing is measured on.

Run: .venv/bin/python tests/data/tool_routing/generate.py  (deterministic: same files)

- tools.json: over 1000 tool cards as a tenant with many connected systems would have them:
  name, description, tags, examples (argument objects) and an input schema. Two sources:
  the CRUD tools of business systems (CRM, help desk, billing, HR...), two or three
  vendors per kind, so near-duplicates abound (`hubspot_create_contact` beside
  `salesforceCreateContact`, `pipedrive-contact-update`: three naming styles), and
  hand-written clusters of special tools, each with its own look-alikes (forecast,
  historical weather, marine forecast...).
  Each says which `set` it is in ("crud" or "special"); that is not part of the card.
- requests.json: over 200 requests as a user would type them, each with the tools that
  serve it (all of them needed). Hand-written for the special tools; for the CRUD tools,
  written from several phrasings per action that use the user's words ("new person",
  "drop", "look up"), not the tool's.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

HERE = Path(__file__).resolve().parent

# -- business systems: kinds of system, their vendors, their records -------------------
# vendor: (key in names, display name, naming style)
VENDORS = {
    "salesforce": ("salesforce", "Salesforce", "camel"),
    "hubspot": ("hubspot", "HubSpot", "snake"),
    "pipedrive": ("pipedrive", "Pipedrive", "kebab"),
    "zendesk": ("zendesk", "Zendesk", "snake"),
    "freshdesk": ("freshdesk", "Freshdesk", "camel"),
    "stripe": ("stripe", "Stripe", "snake"),
    "chargebee": ("chargebee", "Chargebee", "kebab"),
    "quickbooks": ("qbo", "QuickBooks Online", "snake"),
    "xero": ("xero", "Xero", "camel"),
    "bamboohr": ("bamboohr", "BambooHR", "snake"),
    "workday": ("workday", "Workday", "camel"),
    "jira": ("jira", "Jira", "snake"),
    "linear": ("linear", "Linear", "kebab"),
    "asana": ("asana", "Asana", "camel"),
    "shopify": ("shopify", "Shopify", "snake"),
    "woocommerce": ("woo", "WooCommerce", "kebab"),
    "greenhouse": ("greenhouse", "Greenhouse", "snake"),
    "lever": ("lever", "Lever", "camel"),
    "mailchimp": ("mailchimp", "Mailchimp", "snake"),
    "brevo": ("brevo", "Brevo", "kebab"),
    "netsuite": ("netsuite", "NetSuite", "camel"),
    "servicenow": ("snow", "ServiceNow", "snake"),
    "docusign": ("docusign", "DocuSign", "snake"),
    "pandadoc": ("pandadoc", "PandaDoc", "camel"),
    "okta": ("okta", "Okta", "snake"),
    "azuread": ("entra", "Microsoft Entra ID", "camel"),
    "zoho": ("zoho", "Zoho CRM", "snake"),
    "dynamics": ("dynamics", "Dynamics 365", "camel"),
    "intercom": ("intercom", "Intercom", "kebab"),
    "paddle": ("paddle", "Paddle", "camel"),
    "personio": ("personio", "Personio", "kebab"),
    "hibob": ("hibob", "HiBob", "snake"),
    "clickup": ("clickup", "ClickUp", "snake"),
    "monday": ("monday", "monday.com", "camel"),
    "bigcommerce": ("bigcommerce", "BigCommerce", "camel"),
    "workable": ("workable", "Workable", "kebab"),
    "klaviyo": ("klaviyo", "Klaviyo", "camel"),
    "sage": ("sage", "Sage Accounting", "kebab"),
    "coupa": ("coupa", "Coupa", "snake"),
    "jsm": ("jsm", "Jira Service Management", "camel"),
    "adobesign": ("adobesign", "Adobe Acrobat Sign", "kebab"),
    "google": ("gworkspace", "Google Workspace", "snake"),
}

# entity | name token | noun | plural | fields | user words | sample values
ENTITY_TABLE = """
contact | contact | contact | contacts | first_name, last_name, email, phone | person; client's details; customer record; contact card | Maria Lopez; Tom Becker; Aiko Tanaka; Priya Natarajan
company | company | company account | company accounts | name, domain, industry | organisation; business; firm; account | Acme Robotics; Nordlicht GmbH; Blue Harbor Foods
deal | deal | deal (sales opportunity) | deals | title, amount, stage, close_date | opportunity; sale we're chasing; pipeline item; potential sale | the Q3 renewal with Acme; the 40k Nordlicht expansion; Blue Harbor pilot
lead | lead | lead (an unqualified prospect) | leads | name, email, source | prospect; inbound enquiry; potential customer; sign-up from the webinar | Jonas Weber from the trade fair; the webinar sign-up Li Wei
note | note | note attached to a record | notes | record_id, body | comment on the record; memo; remark | 'called, will decide Friday'; 'prefers email over phone'
ticket | ticket | support ticket | support tickets | subject, description, priority, requester_email | customer complaint; support case; help request; issue a customer raised | #48213; the refund complaint from Dana; the login problem ticket
ticket_comment | ticket_comment | comment on a support ticket | ticket comments | ticket_id, body, public | reply on the case; response to the customer; internal remark | #48213; the refund complaint
customer | customer | billing customer | billing customers | email, name, tax_id | paying client; account holder; billing profile | jane@brightpath.io; Orbital Labs
invoice | invoice | invoice | invoices | customer_id, line_items, due_date | bill; statement we sent; amount owed | INV-2024-0042; last month's bill for Orbital Labs
subscription | subscription | subscription plan of a customer | subscriptions | customer_id, plan_id, quantity | recurring plan; membership; monthly package | the Pro plan of Orbital Labs; Jane's annual membership
refund | refund | refund of a payment | refunds | payment_id, amount, reason | money back; reimbursement; chargeback we issue ourselves | payment ch_3KX9; the double charge on order 5521
bill | bill | supplier bill (accounts payable) | supplier bills | vendor_id, amount, due_date | vendor invoice we have to pay; payable; supplier's invoice | the AWS bill for March; the invoice from Printwell
journal_entry | journal_entry | general ledger journal entry | journal entries | date, lines, memo | ledger posting; accounting adjustment; double-entry booking | the accrual for June; a depreciation posting
employee | employee | employee record | employees | first_name, last_name, department, start_date | staff member; team member; worker; new hire | Sven Olsen; Fatima Zahra; Lucas Moreau
time_off | time_off_request | time-off request | time-off requests | employee_id, start, end, type | vacation; leave; holiday booking; days off; PTO | two weeks in August for Sven; Fatima's sick day
issue | issue | issue (bug, story or task) in a tracker | issues | project, title, description, assignee | bug report; backlog item; story; work item | the checkout crash; PAY-311; the dark-mode story
sprint | sprint | sprint (time-boxed iteration) | sprints | board_id, name, goal | iteration; two-week cycle; current cycle | sprint 42; the current iteration of the mobile board
task | task | task in a project | tasks | project, name, due_on, assignee | to-do; action item; assignment | 'send the deck to legal'; the launch checklist item
product | product | catalogue product | products | title, price, sku, stock | item we sell; catalogue entry; SKU; listing | the blue ceramic mug; SKU TSHIRT-RED-M
order | order | customer order | orders | customer, line_items, status | purchase; web shop sale; checkout | order #5521; yesterday's order from Ana
candidate | candidate | job candidate | candidates | name, email, job_id | applicant; person applying; job seeker | Noah Kim; the applicant for the data engineer role
job_posting | job | job opening | job openings | title, department, location | vacancy; role we're hiring for; open position | senior data engineer in Lisbon; the support lead role
campaign | campaign | email campaign | email campaigns | name, audience_id, subject, send_at | newsletter blast; mailing; email send-out | the spring sale newsletter; the product update mailing
audience | audience | mailing list (audience) | mailing lists | name, default_from | subscriber list; distribution list; newsletter list | the beta testers list; EU subscribers
purchase_order | purchase_order | purchase order to a supplier | purchase orders | vendor_id, items, ship_to | PO; order with our supplier; procurement request | PO-7781; the laptop order from Dell
incident | incident | IT incident | IT incidents | short_description, urgency, assignment_group | outage report; IT problem; service disruption | the VPN outage; INC0012345
change_request | change_request | IT change request | change requests | short_description, risk, planned_start | planned change; maintenance approval; CAB request | the database upgrade on Saturday; CHG0030010
envelope | envelope | signature envelope (documents sent for e-signature) | envelopes | documents, signers, subject | contract to be signed; e-signature request; signing packet | the NDA for Orbital Labs; Sven's employment contract
user | user | directory user account | directory users | login, email, groups | login; account for a colleague; SSO user | sven.olsen@example.com; the contractor account of Li Wei
group | group | directory group | directory groups | name, members | team in the directory; access group; security group | Engineering-EU; the finance approvers group
activity | activity | logged sales activity (call, meeting or email) | activities | type, subject, due_date, record_id | call I had; follow-up; touchpoint with the client | the call with Tom Becker; Friday's follow-up with Acme
coupon | coupon | discount coupon for subscriptions | coupons | percent_off, duration, max_redemptions | promo; discount; money-off deal | the BLACKFRIDAY promo; 10% off for nonprofits
credit_note | credit_note | credit note against an invoice | credit notes | invoice_id, amount, reason | credit; partial reversal of a bill; correction to an invoice | INV-2024-0042; the overcharge for Orbital Labs
department | department | department in the org structure | departments | name, head, cost_center | team in the org; business unit; division | Customer Success; the Lisbon engineering team
review | performance_review | performance review cycle entry | performance reviews | employee_id, reviewer, rating | appraisal; annual evaluation; feedback cycle | Sven's appraisal; Fatima's mid-year evaluation
project | project | project (a container of tasks) | projects | name, owner, due_date | initiative; workstream; programme | Atlas; the website relaunch
interview | interview | scheduled interview with a candidate | interviews | candidate_id, interviewers, start | screening call; on-site; chat with an applicant | Noah Kim's technical round; the second interview for the support lead
offer | offer | job offer to a candidate | job offers | candidate_id, salary, start_date | offer letter; proposal to hire; contract offer | Noah Kim; the data engineer finalist
"""

# vendors | entities | tags: a kind of system
SYSTEM_TABLE = """
salesforce, hubspot, pipedrive, zoho, dynamics | contact, company, deal, lead, note, activity | crm, sales
zendesk, freshdesk, servicenow, intercom, jsm | ticket, ticket_comment | support, helpdesk
stripe, chargebee, paddle | customer, invoice, subscription, refund, coupon | billing, payments
quickbooks, xero, netsuite, sage | invoice, bill, journal_entry, customer, credit_note | accounting, finance
bamboohr, workday, personio, hibob | employee, time_off, department, review | hr, people
jira, linear, asana, clickup, monday | issue, sprint, task, project | projects, engineering
shopify, woocommerce, bigcommerce | product, order, customer, coupon | ecommerce, shop
greenhouse, lever, workable | candidate, job_posting, interview, offer | recruiting, hr
mailchimp, brevo, hubspot, klaviyo | campaign, audience | marketing, email
netsuite, quickbooks, coupa | purchase_order | procurement, finance
servicenow | incident, change_request | itsm, it
docusign, pandadoc, adobesign | envelope | signatures, legal
okta, azuread, google | user, group | identity, it
"""


def table(text: str) -> list[list[str]]:
    """The rows of a "|"-separated table: blank lines and "#" comments skipped."""
    rows = [line.strip() for line in text.strip().splitlines()]
    return [[cell.strip() for cell in row.split("|")] for row in rows if row and row[0] != "#"]


def items(cell: str, separator: str = ",") -> list[str]:
    return [item.strip() for item in cell.split(separator) if item.strip()]


# entity: (name token, noun, plural, fields, user words, sample values)
ENTITIES = {
    key: (token, noun, plural, items(fields), items(words, ";"), items(values, ";"))
    for key, token, noun, plural, fields, words, values in table(ENTITY_TABLE)
}
SYSTEMS = [(items(v), items(e), items(t)) for v, e, t in table(SYSTEM_TABLE)]

ACTIONS = ["create", "get", "list", "update", "delete", "archive"]
ONLY = {
    "ticket_comment": ["create", "list"],
    "refund": ["create", "get", "list"],
    "note": ["create", "list", "update", "delete"],
    "journal_entry": ["create", "get", "list"],
    "sprint": ["create", "get", "list", "update"],
    "audience": ["create", "get", "list"],
    "time_off": ["create", "get", "list", "update"],
    "envelope": ["create", "get", "list"],
}

DESCRIBE = {
    "create": [
        "Create a new {noun} in {vendor}. Needs {fields}. Returns the id of the new record.",
        "Adds a {noun} to {vendor} with the given {fields}; fails if a duplicate exists.",
        "Creates one {noun} in the {vendor} account ({fields}).",
    ],
    "get": [
        "Fetch a single {noun} from {vendor} by its id: {fields} and timestamps.",
        "Returns one {noun} stored in {vendor}, looked up by id.",
        "Reads the full details of a {noun} in {vendor}, including {fields}.",
    ],
    "list": [
        "List {plural} in {vendor}, filtered by {fields}; paginated, newest first.",
        "Search {vendor} {plural} by keyword or by {fields}. Returns up to 100 matches.",
        "Finds {plural} in {vendor} matching a query; supports filters on {fields}.",
    ],
    "update": [
        "Update fields of an existing {noun} in {vendor} ({fields}); unspecified fields stay.",
        "Changes a {noun} in {vendor}: pass its id and the fields to modify ({fields}).",
        "Edits one {noun} record in {vendor}; partial updates of {fields}.",
    ],
    "delete": [
        "Permanently delete a {noun} from {vendor} by id. This cannot be undone.",
        "Removes a {noun} from {vendor}. Destructive: the record is gone for good.",
    ],
    "archive": [
        "Archive a {noun} in {vendor}: hidden from lists but kept and restorable.",
        "Marks a {noun} as archived (inactive) in {vendor}; it can be restored later.",
    ],
}

# How users ask for each action: their words, rarely the tool's.
ASK = {
    "create": [
        "add {value} as a new {word} in {vendor}",
        "can you set up {value} in {vendor} as a {word}?",
        "{vendor}: new {word} please, {value}",
        "please register {value} as a {word} over in {vendor}",
    ],
    "get": [
        "pull up the {word} {value} in {vendor}, I need the details",
        "show me everything {vendor} has on the {word} {value}",
        "what does {vendor} say about {value}? it's a {word}",
        "open the {word} {value} from {vendor}",
    ],
    "list": [
        "which {word}s do we have in {vendor} like {value}?",
        "search {vendor} for {word}s similar to {value}",
        "give me all {vendor} {word}s that mention {value}",
        "look for {value} among our {vendor} {word}s",
    ],
    "update": [
        "the {word} {value} in {vendor} is out of date, change it",
        "fix the {word} {value} in {vendor}, wrong info on it",
        "modify the {word} {value} in {vendor}",
        "{vendor}: correct the {word} for {value}",
    ],
    "delete": [
        "get rid of the {word} {value} in {vendor} for good",
        "erase the {word} {value} from {vendor} permanently",
        "wipe the {word} {value} out of {vendor}, we don't want it at all",
    ],
    "archive": [
        "put the {word} {value} away in {vendor}, hide it but keep it",
        "shelve the {word} {value} in {vendor} for now, we may need it again",
        "deactivate the {word} {value} in {vendor} without losing it",
    ],
}


def tool_name(vendor: str, action: str, entity: str) -> str:
    key, _, style = VENDORS[vendor]
    token = ENTITIES[entity][0]
    words = [key, action, *token.split("_")]
    if action == "list":
        words = [
            key,
            "search" if vendor in ("zendesk", "xero", "greenhouse") else "list",
            *token.split("_"),
            "s",
        ]
        words[-2] += "s" if not words[-2].endswith("s") else ""
        words.pop()
    if style == "camel":
        return words[0] + "".join(w.capitalize() for w in words[1:])
    if style == "kebab":
        return "-".join([words[0], *words[2:], words[1]])  # vendor-entity-action
    return "_".join(words)


def crud_tools(rng: random.Random) -> tuple[list[dict], list[dict]]:
    tools, requests, seen = [], [], set()
    for vendors, entities, tags in SYSTEMS:
        for vendor in vendors:
            display = VENDORS[vendor][1]
            for entity in entities:
                _, noun, plural, fields, words, values = ENTITIES[entity]
                for action in ONLY.get(entity, ACTIONS):
                    name = tool_name(vendor, action, entity)
                    if name in seen:
                        continue
                    seen.add(name)
                    template = rng.choice(DESCRIBE[action])
                    description = template.format(
                        noun=noun, plural=plural, vendor=display, fields=", ".join(fields)
                    )
                    props = (
                        {"id": {"type": "string"}}
                        if action in ("get", "update", "delete", "archive")
                        else {}
                    )
                    if action in ("create", "update", "list"):
                        props.update({f: {"type": "string"} for f in fields})
                    if action == "list":
                        props["query"] = {"type": "string"}
                    tools.append(
                        {
                            "name": name,
                            "description": description,
                            "tags": sorted({*tags, vendor, action}),
                            "examples": [],
                            "input_schema": {"type": "object", "properties": props},
                            "set": "crud",  # (not part of the card: which half it is in)
                        }
                    )
                    if rng.random() < 0.1:
                        phrasing = rng.choice(ASK[action])
                        text = phrasing.format(
                            value=rng.choice(values), word=rng.choice(words), vendor=display
                        )
                        requests.append({"request": text[0].upper() + text[1:], "tools": [name]})
    return tools, requests


# -- special tools, in clusters of look-alikes; "?" lines are requests for the tool above --
SPECIALS = """
# weather
get_weather_forecast | Daily weather forecast (temperature, precipitation, wind) for a place, up to 14 days ahead. | weather | city=Lisbon; days=3
? will I need an umbrella in Lisbon this weekend?
? how warm is it going to be in Oslo on Thursday
get_current_conditions | Current observed weather at a location: temperature, humidity, wind, cloud cover. | weather | city=Berlin
? what's it like outside in Berlin right now
get_historical_weather | Past weather observations for a place and date range (daily summaries since 1950). | weather, history | city=Paris; start=2023-07-01; end=2023-07-31
? how hot did it get in Paris in July 2023?
get_marine_forecast | Sea conditions: wave height, swell period, water temperature and tides for a coastal point. | weather, marine | lat=38.7; lon=-9.4
? are the waves at Ericeira good for surfing tomorrow?
get_air_quality | Air quality index and pollutant levels (PM2.5, PM10, ozone, NO2) for a location. | weather, health | city=Delhi
? is the air safe for a run in Delhi this morning? smog looks bad
get_uv_index | Hourly ultraviolet index forecast and sunburn risk for a location. | weather, health | city=Sydney
? how strong is the sun in Sydney today, do I need sunscreen
get_pollen_forecast | Pollen counts by type (grass, tree, weed) for the next days. | weather, health | city=Vienna
? my hay fever is killing me, what are birch levels in Vienna this week
get_severe_weather_alerts | Active official warnings (storms, floods, heat) issued for a region. | weather, alerts | region=Florida
? any hurricane warnings in Florida at the moment?
get_sunrise_sunset | Sunrise, sunset and daylight length for a place and date. | weather, astronomy | city=Reykjavik; date=2024-12-21
? when does it get dark in Reykjavik on December 21st
# geo and travel
geocode_address | Convert a street address into latitude/longitude coordinates. | maps, geo | address=10 Downing St, London
? what are the coordinates of 221B Baker Street
reverse_geocode | Turn latitude/longitude coordinates into the nearest street address. | maps, geo | lat=48.8584; lon=2.2945
? which address is at 48.8584, 2.2945?
get_driving_directions | Turn-by-turn driving route, distance and travel time between two places. | maps, travel | origin=Munich; destination=Salzburg
? how long is the drive from Munich to Salzburg and which way should I go
get_transit_directions | Public transport route (trains, buses, metro) between two addresses with departure times. | maps, travel | origin=Gare du Nord; destination=Orly
? how do I get from Gare du Nord to Orly by metro or bus
search_nearby_places | Find points of interest (restaurants, pharmacies, ATMs) near a location. | maps, places | near=Alexanderplatz; category=pharmacy
? is there a chemist open close to Alexanderplatz
get_place_details | Opening hours, phone, rating and address of one place by its place id. | maps, places | place_id=ChIJ123
get_timezone_for_location | The IANA time zone and UTC offset at given coordinates. | maps, time | lat=35.68; lon=139.69
? what time zone is Tokyo in
search_flights | Search flight offers between airports for dates, cabin class and passengers. | travel, flights | from=LHR; to=JFK; date=2024-09-12
? find me a cheap flight London to New York on 12 September
get_flight_status | Live status of a flight by number: delays, gate, terminal. | travel, flights | flight=LH400
? is LH400 on time today?
book_hotel | Reserve a hotel room for given dates and guests; returns a confirmation number. | travel, hotels | hotel_id=H991; check_in=2024-10-02; nights=3
? reserve a room at the Hotel Regina for three nights from October 2
search_hotels | Find hotels in a city for dates with price, rating and distance filters. | travel, hotels | city=Rome; check_in=2024-10-02
? where can I stay in Rome for under 150 a night in early October
cancel_hotel_booking | Cancel an existing hotel reservation by confirmation number. | travel, hotels | confirmation=CX88213
? I can't make it, call off my stay with confirmation CX88213
get_visa_requirements | Entry and visa rules for a passport holder travelling to a country. | travel | passport=IN; destination=JP
? does an Indian passport holder need a visa for Japan
convert_currency | Convert an amount between currencies at today's reference rate. | finance, fx | amount=250; from=EUR; to=USD
? how many dollars is 250 euros
get_exchange_rate_history | Daily exchange rates of a currency pair over a period. | finance, fx | pair=GBP/EUR; start=2024-01-01
? how has the pound moved against the euro since January
# shipping
create_shipment | Create a shipment with a carrier and buy the label; returns tracking number and label PDF. | shipping, logistics | carrier=dhl; weight_kg=2.5
? I need a DHL label for a 2.5 kg parcel to Hamburg
track_shipment | Current status and scan history of a parcel by its tracking number. | shipping, logistics | tracking_number=1Z999AA10123456784
? where is my package 1Z999AA10123456784?
get_shipping_rates | Compare carrier prices and delivery times for a parcel's size, weight and route. | shipping, logistics | from=NL; to=US; weight_kg=1.2
? what would it cost to send a 1.2 kg box from the Netherlands to the US
schedule_pickup | Book a courier pickup at an address for a date and time window. | shipping, logistics | address=Keizersgracht 1; date=2024-05-03
? have the courier collect three boxes from our office on Friday afternoon
validate_shipping_address | Check and normalise a postal address before shipping; flags undeliverable ones. | shipping, addresses | address=1 Main St, Springfield
? is "12 Rue de la Paix 75002 Paris" a deliverable address?
void_shipping_label | Void an unused shipping label and request a refund of its postage. | shipping, logistics | tracking_number=1Z999
? we didn't send that parcel after all, cancel the label and get the postage back
create_return_label | Generate a prepaid return label for a customer's order. | shipping, returns | order_id=5521
? the customer wants to send the shoes back, email them a prepaid label
get_customs_tariff_code | Look up the HS tariff code and duty rate of a product for a destination country. | shipping, customs | product=leather handbag; destination=US
? what HS code and import duty apply to leather handbags going to the US
# calendars and meetings
create_calendar_event | Create an event in a calendar with title, time, attendees and location. | calendar | title=Quarterly review; start=2024-06-03T10:00
? put a quarterly review in my diary Monday at 10 with Ana and Raj
find_meeting_time | Suggest times when all given attendees are free, within working hours. | calendar, scheduling | attendees=ana@x.com,raj@x.com; duration_min=30
? when can Ana, Raj and I all squeeze in half an hour this week?
list_calendar_events | List events of a calendar between two dates. | calendar | start=2024-06-03; end=2024-06-07
? what's on my schedule next week
reschedule_calendar_event | Move an existing calendar event to a new start time and notify attendees. | calendar | event_id=evt_91; start=2024-06-04T15:00
? push my 1:1 with Raj to Tuesday at 3pm
cancel_calendar_event | Cancel a calendar event and send cancellation notices to attendees. | calendar | event_id=evt_91
? call off tomorrow's standup and let everyone know
get_free_busy | Free/busy blocks of one or more calendars over a time range. | calendar, scheduling | calendars=room-4b; start=2024-06-03
? is meeting room 4B taken on Wednesday afternoon
book_meeting_room | Reserve a meeting room resource for a time slot. | calendar, facilities | room=4B; start=2024-06-05T14:00
? grab room 4B for us Wednesday 2 to 3
set_out_of_office | Turn on the automatic out-of-office reply and block the calendar for dates. | calendar, email | start=2024-08-01; end=2024-08-15
? I'm on holiday 1-15 August, set up my away message
create_video_meeting_link | Create a video conference link (Zoom/Meet/Teams) for a meeting. | meetings, video | title=Design sync
? give me a zoom link for the design sync
get_meeting_transcript | Fetch the transcript of a recorded video meeting. | meetings, video | meeting_id=mt_22
? what was said in yesterday's design sync recording
summarize_meeting_recording | Produce a summary and action items from a recorded meeting. | meetings, ai | meeting_id=mt_22
? give me the key decisions and to-dos from the design sync call
# email and messaging
send_email | Send an email to one or more recipients with subject, body and attachments. | email | to=ana@example.com; subject=Contract
? write to Ana that the contract is ready and attach the PDF
search_mailbox | Search the user's mailbox by sender, subject, words and date. | email | query=from:raj invoice
? find the message Raj sent me about the invoice last month
create_email_draft | Save an email as a draft without sending it. | email | to=board@example.com; subject=Q2 update
? prepare an email to the board with the Q2 update but don't send it yet
forward_email | Forward an existing message to other recipients with an optional note. | email | message_id=m_88; to=legal@example.com
? pass that message from the landlord on to legal
create_email_filter | Create a mailbox rule that labels, moves or deletes matching incoming mail. | email, rules | from=newsletter@shop.com; action=archive
? automatically file everything from newsletter@shop.com out of my inbox
unsubscribe_from_list | Unsubscribe the mailbox from a mailing list using its List-Unsubscribe header. | email | sender=deals@shop.com
? stop these promo mails from deals@shop.com
post_slack_message | Post a message to a Slack channel or thread. | chat, slack | channel=#releases; text=v2.3 is live
? tell the #releases channel that 2.3 is out
send_teams_message | Send a message to a Microsoft Teams chat or channel. | chat, teams | channel=Finance; text=Books closed
? drop a note in the Finance channel on Teams that the books are closed
send_sms | Send a text message to a mobile number. | sms, messaging | to=+4915112345678; text=Your table is ready
? text +49 151 12345678 that their table is ready
send_whatsapp_message | Send a WhatsApp message using an approved template to a customer. | whatsapp, messaging | to=+351912345678; template=order_shipped
? ping the customer on WhatsApp that their order has shipped
create_slack_channel | Create a new Slack channel and invite members. | chat, slack | name=proj-atlas
? open a new Slack room for project Atlas and add the core team
set_slack_status | Set the user's Slack status text, emoji and expiry. | chat, slack | text=In a workshop; emoji=:hammer:
? set me as busy in a workshop on Slack until 5
search_slack_messages | Search Slack messages by words, channel and author. | chat, slack | query=deploy freeze
? what did people say about the deploy freeze on Slack?
send_push_notification | Send a mobile push notification to a user's devices. | notifications, mobile | user_id=u_19; title=Payment received
? notify the user's phone that we received their payment
# files and documents
search_drive_files | Search files in cloud storage (Google Drive, OneDrive) by name and content. | files, storage | query=board deck 2024
? where's the board presentation from this year in our drive?
upload_file | Upload a file to a folder in cloud storage. | files, storage | folder=/Contracts; name=nda.pdf
? save this NDA into the Contracts folder
share_file | Share a file or folder with people, setting view or edit rights. | files, sharing | file_id=f_21; email=raj@x.com; role=editor
? let Raj edit the budget spreadsheet
create_folder | Create a folder in cloud storage. | files, storage | path=/Clients/Orbital
? make a new directory for Orbital Labs under Clients
move_file | Move or rename a file in cloud storage. | files, storage | file_id=f_21; to=/Archive
delete_file | Delete a file from cloud storage (moved to the bin for 30 days). | files, storage | file_id=f_21
? trash the old draft of the handbook
convert_document_to_pdf | Convert a Word, Excel or PowerPoint document to PDF. | documents, conversion | file_id=f_88
? turn the proposal .docx into a PDF
extract_text_from_pdf | Extract the text (with OCR for scanned pages) from a PDF file. | documents, ocr | file_id=f_90
? read out what the scanned lease agreement says
merge_pdfs | Combine several PDF files into one in the given order. | documents | files=f_1,f_2
? stitch these three PDFs together into a single file
compress_image | Reduce the file size of an image, optionally resizing it. | images, media | file_id=img_3; max_width=1200
? this photo is 12MB, make it small enough for the website
translate_document | Translate a document into another language, keeping its layout. | documents, translation | file_id=f_91; target=de
? I need the German version of the product brochure
translate_text | Translate a short text between languages. | translation, language | text=Where is the station?; target=ja
? how do you say "where is the station" in Japanese
detect_language | Identify the language of a piece of text. | language | text=Dzień dobry
? what language is "Dzień dobry" in?
summarize_document | Summarise a long document into key points. | documents, ai | file_id=f_92
? give me the gist of the 80-page audit report
# devops
list_kubernetes_pods | List pods of a Kubernetes namespace with status and restarts. | devops, kubernetes | namespace=payments
? which pods are crash-looping in the payments namespace?
restart_kubernetes_deployment | Rolling restart of a Kubernetes deployment. | devops, kubernetes | namespace=payments; deployment=api
? bounce the payments api deployment on k8s
scale_kubernetes_deployment | Change the replica count of a Kubernetes deployment. | devops, kubernetes | deployment=api; replicas=6
? we need 6 copies of the api running instead of 3
get_pod_logs | Fetch recent log lines of a pod's container. | devops, kubernetes, logs | pod=api-7f9c; lines=200
? show me the last 200 lines the api-7f9c pod printed
rollback_deployment | Roll a deployment back to its previous revision. | devops, deploys | service=checkout
? the new checkout release is broken, go back to the version before
trigger_ci_pipeline | Start a CI pipeline run for a branch of a repository. | devops, ci | repo=web; branch=main
? kick off a build of main for the web repo
get_ci_pipeline_status | Status, stages and failing jobs of a CI pipeline run. | devops, ci | run_id=8812
? why did build 8812 go red?
create_pull_request | Open a pull request from a branch in a Git repository. | git, code | repo=web; head=fix/login
? open a PR for my fix/login branch against main
merge_pull_request | Merge an approved pull request. | git, code | repo=web; number=431
? PR 431 is approved, land it
list_open_pull_requests | List open pull requests of a repository with review state. | git, code | repo=web
? what PRs are waiting for review in the web repo
create_git_branch | Create a branch from a commit or another branch. | git, code | repo=web; name=release/2.4
? cut a release/2.4 branch off main
get_cloud_cost_report | Cloud spend by service and tag for a period (AWS, GCP, Azure). | cloud, finops | period=2024-05
? how much did we spend on AWS last month and on what
list_ec2_instances | List EC2 virtual machines with state, type and tags. | cloud, aws | region=eu-west-1
? which servers are running in eu-west-1
stop_ec2_instance | Stop a running EC2 instance. | cloud, aws | instance_id=i-0abc
? shut down the i-0abc box, we're not using it
create_s3_bucket | Create an S3 bucket with encryption and versioning settings. | cloud, aws, storage | name=acme-backups
? make a new S3 bucket for backups
purge_cdn_cache | Invalidate cached paths on the CDN so fresh content is served. | cloud, cdn | paths=/assets/*
? the website still shows the old logo, clear the cached assets
get_service_metrics | Time series of a service's latency, error rate and throughput. | observability, metrics | service=checkout; window=1h
? has checkout latency gone up in the last hour?
query_logs | Search application logs with a query language over a time range. | observability, logs | query=level:error service:auth
? find error lines from the auth service since noon
create_alert_rule | Create a monitoring alert that fires when a metric crosses a threshold. | observability, alerts | metric=error_rate; threshold=0.05
? page us if the error rate goes above 5 percent
acknowledge_alert | Acknowledge a firing alert so on-call stops being paged. | observability, oncall | alert_id=al_77
? I've seen the disk alert, stop paging me
get_oncall_schedule | Who is on call now and next for a team's rotation. | oncall, incidents | team=platform
? who's carrying the pager for platform tonight
create_status_page_incident | Publish an incident on the public status page with its impact. | incidents, status | title=Degraded API performance
? tell our customers on the status page that the API is slow
check_ssl_certificate | Expiry date, issuer and chain validity of a host's TLS certificate. | security, web | host=shop.example.com
? when does the certificate of shop.example.com run out?
check_website_uptime | Check whether a URL responds, with status code and response time. | web, monitoring | url=https://example.com
? is our homepage up right now?
lookup_dns_records | Look up DNS records (A, AAAA, MX, TXT, CNAME) of a domain. | network, dns | domain=example.com; type=MX
? what mail servers does example.com use
rotate_api_key | Issue a new API key for a service account and revoke the old one after a grace period. | security, secrets | service=billing-worker
? the billing worker's key leaked, replace it
scan_dependencies_for_vulnerabilities | Scan a repository's dependencies for known CVEs. | security, code | repo=web
? do any of the web app's packages have known security holes?
run_sql_query | Run a read-only SQL query on the analytics warehouse. | data, sql | query=select count(*) from orders
? how many orders did we have in total? query the warehouse
create_database_backup | Take an on-demand snapshot of a database. | data, databases | database=orders-prod
? snapshot the production orders database before the migration
restore_database_backup | Restore a database from a snapshot into a new instance. | data, databases | snapshot=snap-991
? bring back yesterday's snapshot snap-991 into a fresh instance
# analytics and reporting
get_website_traffic | Visits, users and sources of a website over a period (web analytics). | analytics, marketing | site=example.com; period=last_7_days
? how many people came to the site this week, and from where
get_conversion_funnel | Step-by-step conversion rates of a product funnel. | analytics, product | funnel=signup
? where do people drop off in sign-up?
get_sales_report | Revenue, orders and average order value by day, product or region. | analytics, sales | period=2024-Q2; by=region
? how did sales do per region last quarter
get_churn_metrics | Customer churn and retention rates by cohort. | analytics, subscriptions | period=2024
? what share of customers cancelled this year
run_ab_test_analysis | Statistical results of an A/B experiment: uplift, confidence, sample sizes. | analytics, experiments | experiment=checkout_button
? did the green checkout button actually win the experiment?
create_dashboard | Create a dashboard with charts from saved queries. | analytics, bi | title=Support KPIs
? build me a board with our support KPIs on it
export_report_csv | Export a saved report as a CSV file. | analytics, export | report_id=r_19
? download the monthly revenue report as a spreadsheet file
get_nps_score | Net promoter score and its trend from survey responses. | analytics, surveys | period=2024-Q2
? how likely are customers to recommend us, according to the latest survey
create_survey | Create a survey with questions and a shareable link. | surveys, feedback | title=Onboarding feedback
? set up a questionnaire asking new users how onboarding went
get_survey_responses | Responses of a survey, with per-question summaries. | surveys, feedback | survey_id=s_4
? what did people answer in the onboarding questionnaire
# hr extras
run_payroll | Run payroll for a pay period and produce payslips. | hr, payroll | period=2024-05
? pay everyone for May
get_payslip | An employee's payslip for a month. | hr, payroll | employee_id=e_12; month=2024-05
? send me my salary slip for May
get_leave_balance | Remaining holiday and sick days of an employee. | hr, leave | employee_id=e_12
? how many vacation days do I have left
get_org_chart | Reporting lines: who reports to whom under a manager. | hr, people | manager=e_3
? who is on Lucía's team
start_employee_onboarding | Start the onboarding checklist for a new hire: accounts, laptop, training. | hr, onboarding | employee_id=e_40
? Sven starts Monday, kick off everything he needs for day one
start_employee_offboarding | Start offboarding: revoke access, collect equipment, final pay. | hr, offboarding | employee_id=e_12
? Lucas is leaving on Friday, begin the exit process
submit_expense_report | Submit an expense claim with receipts for reimbursement. | finance, expenses | amount=84.50; category=travel
? claim back the 84.50 I spent on the taxi to the client
approve_expense_report | Approve or reject a submitted expense claim. | finance, expenses | report_id=ex_7; decision=approve
? OK Fatima's travel claim
get_benefits_enrollment | Health, pension and other benefits an employee is enrolled in. | hr, benefits | employee_id=e_12
? which health plan am I signed up for?
request_equipment | Request equipment (laptop, monitor, phone) for an employee. | it, procurement | item=laptop; employee_id=e_40
? order a laptop and a screen for the new hire
# legal and compliance
check_sanctions_list | Screen a person or company against international sanctions lists. | compliance, kyc | name=Orbital Labs
? is this new supplier on any sanctions list?
verify_vat_number | Validate an EU VAT number and return the registered company name. | compliance, tax | vat=DE123456789
? is DE123456789 a real VAT id?
calculate_sales_tax | Sales tax or VAT due for an amount, product type and destination. | tax, finance | amount=120; country=DE
? how much VAT do I add to a 120 euro sale to Germany
verify_identity_document | Check a passport or ID card photo for authenticity and extract its data. | compliance, kyc | document=scan_0042
? is the passport this customer uploaded genuine?
create_gdpr_export | Export all personal data held about a person (data subject access request). | privacy, gdpr | email=jane@brightpath.io
? a customer asked for a copy of everything we store about her
erase_personal_data | Erase a person's personal data across systems (right to be forgotten). | privacy, gdpr | email=jane@brightpath.io
? Jane wants us to forget her completely, delete her data everywhere
search_contract_clauses | Search signed contracts for clauses (termination, liability, renewal). | legal, contracts | query=auto-renewal
? which of our contracts renew automatically?
get_contract_renewal_dates | Upcoming renewal and notice dates of contracts. | legal, contracts | within_days=90
? which agreements are up for renewal in the next three months
# knowledge and search
search_web | Search the public web and return the top results with snippets. | search, web | query=best practices for onboarding
? look online for recent articles on four-day work weeks
search_knowledge_base | Search the company's internal help articles and policies. | search, knowledge | query=expense policy
? what's our internal policy on expensing meals?
search_wikipedia | Look up an encyclopedia article and return its summary. | search, reference | title=Ada Lovelace
? who was Ada Lovelace
fetch_web_page | Download a web page and return its readable text. | web | url=https://example.com/pricing
? read the pricing page at example.com/pricing for me
get_stock_quote | Latest price and day change of a listed stock by ticker. | finance, markets | ticker=AAPL
? how is Apple trading today
get_company_financials | Revenue, profit and balance-sheet figures of a public company. | finance, markets | ticker=SAP
? what was SAP's revenue and profit last year
get_news_headlines | Latest news headlines by topic or keyword. | news | topic=renewable energy
? anything new in the news about renewable energy?
define_word | Dictionary definition, pronunciation and examples of a word. | language, reference | word=ephemeral
? what does ephemeral mean
get_public_holidays | Public holidays of a country for a year. | calendar, reference | country=PT; year=2024
? is 13 June a holiday in Portugal?
# ecommerce and customer extras
check_inventory_level | Stock on hand and reserved quantity of a SKU per warehouse. | inventory, ecommerce | sku=MUG-BLUE
? do we still have blue mugs in stock
adjust_inventory | Add or remove stock of a SKU in a warehouse with a reason. | inventory, ecommerce | sku=MUG-BLUE; delta=-3; reason=damaged
? three blue mugs broke, take them off the stock count
create_discount_code | Create a discount code with amount, validity and usage limits. | ecommerce, marketing | code=SPRING20; percent=20
? make a 20 percent off code for the spring sale
get_abandoned_carts | Carts left without checkout, with customer and value. | ecommerce, marketing | since=2024-06-01
? who left stuff in their basket without buying this month
get_product_reviews | Customer reviews and ratings of a product. | ecommerce, feedback | product_id=p_88
? what are buyers saying about the ceramic mug
issue_gift_card | Issue a gift card with a balance to a customer. | ecommerce, loyalty | amount=50; email=ana@example.com
? give Ana a 50 euro voucher as an apology
get_loyalty_points | Loyalty points balance and tier of a customer. | loyalty, customers | customer_id=c_19
? how many reward points does customer c_19 have
get_payment_status | Status of a card or bank payment: authorised, captured, failed, disputed. | payments | payment_id=pi_33
? did the payment pi_33 go through?
list_disputes | Card payment disputes (chargebacks) with reason and deadline. | payments, disputes | status=needs_response
? which chargebacks do we still have to answer
create_payment_link | Create a shareable payment link for an amount or product. | payments | amount=300; currency=EUR
? send me a link the client can use to pay 300 euros
# smart office and misc
set_thermostat | Set the target temperature of a room's thermostat. | facilities, iot | room=4B; celsius=21
? it's freezing in room 4B, warm it up to 21 degrees
unlock_door | Unlock a door of the office access system for a short time. | facilities, security | door=loading-bay
? let the delivery driver in at the loading bay
report_facility_issue | Report a facilities problem (broken light, leak, cleaning) for a location. | facilities | location=3rd floor kitchen; issue=leaking tap
? the tap in the third-floor kitchen is dripping everywhere
book_desk | Reserve a hot desk in the office for a day. | facilities, workplace | date=2024-06-06; floor=2
? save me a desk on floor 2 Thursday
order_lunch_catering | Order catering for a meeting: number of people, diet, delivery time. | facilities, food | people=12; time=12:30
? get sandwiches for twelve delivered at half past twelve, two vegan
create_reminder | Create a reminder for the user at a time. | productivity | text=call the bank; at=2024-06-03T09:00
? remind me to phone the bank on Monday morning
create_note | Save a personal note. | productivity, notes | title=Ideas; body=...
? jot down: try the new onboarding flow with 10 users
search_notes | Search the user's personal notes. | productivity, notes | query=onboarding
? find what I wrote about onboarding ideas
start_timer | Start a time-tracking timer on a project. | productivity, time-tracking | project=Atlas
? start clocking my hours on Atlas
get_timesheet | Hours tracked per project and day for a person. | productivity, time-tracking | week=2024-W23
? how many hours did I log on each project this week
"""

# Requests that need two tools together: request | tools
MULTI_TABLE = """
find the message Raj sent about the invoice and forward it to legal | search_mailbox, forward_email
check if the Lisbon office is getting storms and tell #ops on Slack | get_severe_weather_alerts, post_slack_message
snapshot orders-prod then roll the checkout release back | create_database_backup, rollback_deployment
what would shipping 3 kg to Canada cost, and book the courier for Friday | get_shipping_rates, schedule_pickup
translate the brochure into German and share it with Raj | translate_document, share_file
when are Ana and Raj both free, then put the review in the calendar | find_meeting_time, create_calendar_event
convert 900 dollars to euros and make a payment link for that amount | convert_currency, create_payment_link
look up who's on call for platform and text them the outage details | get_oncall_schedule, send_sms
"""


def special_tools() -> tuple[list[dict], list[dict]]:
    tools, requests = [], []
    for row in table(SPECIALS):
        if row[0].startswith("?"):
            requests.append({"request": row[0][1:].strip(), "tools": [tools[-1]["name"]]})
            continue
        name, description, tags, example = row
        args = dict(pair.split("=", 1) for pair in example.split("; ")) if example else {}
        tools.append(
            {
                "name": name,
                "description": description,
                "tags": sorted(items(tags)),
                "examples": [args] if args else [],
                "input_schema": {
                    "type": "object",
                    "properties": {k: {"type": "string"} for k in args},
                },
                "set": "special",
            }
        )
    return tools, requests


# Example values that stand in for ones the requests repeat: a tool's examples are written
# before anyone asks, so they must not hand the ranking the request's own words.
EXAMPLE_VALUES = {
    "city": ["Porto", "Zurich", "Montreal", "Osaka", "Valencia"],
    "region": ["Queensland", "Bavaria"],
    "country": ["NZ", "CA"],
    "date": ["2025-03-14"],
    "start": ["2025-03-10"],
    "end": ["2025-03-21"],
    "check_in": ["2025-03-10"],
    "period": ["2025-01"],
    "month": ["2025-01"],
    "email": ["someone@example.org"],
    "origin": ["Lyon"],
    "destination": ["Geneva"],
    "address": ["5 Example Road, Leeds"],
    # (other keys' values depend on the tool: such a value is dropped instead)
}


def _tokens(text: str) -> set[str]:
    return {w for w in re.findall(r"[a-z0-9]+", text.lower()) if len(w) > 1}


def without_request_words(tools: list[dict], requests: list[dict]) -> None:
    """Replace (or drop) each example value sharing a word with a request for its tool."""
    asked: dict[str, set[str]] = {}
    for item in requests:
        for name in item["tools"]:
            asked.setdefault(name, set()).update(_tokens(item["request"]))
    for tool in tools:
        words = asked.get(tool["name"], set())
        for example in tool["examples"]:
            for key, value in list(example.items()):
                if not _tokens(str(value)) & words:
                    continue
                stand_ins = [v for v in EXAMPLE_VALUES.get(key, []) if not _tokens(v) & words]
                if stand_ins:
                    example[key] = stand_ins[0]
                else:
                    del example[key]
        tool["examples"] = [example for example in tool["examples"] if example]


def main() -> None:
    rng = random.Random(18)
    specials, special_requests = special_tools()
    crud, crud_requests = crud_tools(rng)
    tools = specials + crud
    names = [t["name"] for t in tools]
    assert len(names) == len(set(names)), "duplicate tool names"
    requests = (
        special_requests
        + crud_requests
        + [{"request": text, "tools": items(wanted)} for text, wanted in table(MULTI_TABLE)]
    )
    for item in requests:
        assert all(name in names for name in item["tools"]), item
    without_request_words(tools, requests)
    assert all(re.fullmatch(r"[a-zA-Z0-9_-]{1,64}", n) for n in names)
    (HERE / "tools.json").write_text(json.dumps(tools, indent=1) + "\n")
    (HERE / "requests.json").write_text(json.dumps(requests, indent=1) + "\n")
    print(f"{len(tools)} tools ({len(specials)} special), {len(requests)} requests")


if __name__ == "__main__":
    main()
