import { StrictMode } from "react";
import { createRoot } from "react-dom/client";
import { App } from "./app/App";
import { adoptTokenFromLocation, watchOtherTabs } from "./auth/token";
import "./styles.css";

adoptTokenFromLocation();
window.addEventListener("hashchange", adoptTokenFromLocation); // a link followed within the page
watchOtherTabs();

createRoot(document.getElementById("root")!).render(
  <StrictMode>
    <App />
  </StrictMode>,
);
